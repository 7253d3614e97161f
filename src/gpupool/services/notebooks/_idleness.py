"""Notebooks' idleness: how the GPUs of notebooks nobody uses are given back.

The notebook idle pipeline (``gpupool.loops.notebook_idle``), beside the control loop, looks
every ``min(60 s, idle time / 4)`` at each running notebook that holds GPUs, in three steps that
hold no transaction across I/O: (1) read the notebooks and where they serve; (2) ask each
JupyterLab for its kernels (``/api/kernels``, with the notebook's token, without counting
as activity) and read its GPU samples (``services.metrics.gpu_busy``); (3) record what it
saw, and stop the notebooks idle for ``notebook_idle_seconds`` (``domain.notebooks.judge``),
each guarded by its job id so that a notebook stopped or resumed meanwhile is left alone.
The idle time counts from JupyterLab's first answer to the watch: its own start-up is not
idleness.

Each look also records as stopped the notebooks whose job ended by itself
(``_notebooks.settle``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import gpupool.services.notebooks._notebooks as notebooks
from gpupool.domain.endpoints import Via
from gpupool.domain.notebooks import Kernel, StopCause, Verdict, base_path, idle_message, judge
from gpupool.executors.base import Executor
from gpupool.services import metrics
from gpupool.services.jobs import endpoints_of
from gpupool.store.models import JobModel, NotebookModel

LONGEST_INTERVAL = 60.0


@dataclass(frozen=True)
class Look:
    """A running notebook with GPUs, as step (1) read it."""

    notebook_id: int
    job_id: int
    url: str  # its JupyterLab's kernels, through its own port
    token: str
    active_at: float | None  # None: its JupyterLab never answered the watch yet
    via: Via = None  # the way to it, when it has a network of its own (Executor.endpoint)


@dataclass(frozen=True)
class Seen:
    look: Look
    verdict: Verdict
    gpu_reports: bool  # its GPUs report utilisation (False: declared GPUs)


def interval(idle_seconds: float) -> float:
    """How often the notebooks are looked at: ``min(60 s, idle time / 4)``."""
    return min(LONGEST_INTERVAL, idle_seconds / 4)


def looks(session: Session, executor: Executor) -> list[Look]:
    """Step (1): the running notebooks that hold GPUs, and where their JupyterLab answers."""
    rows = session.execute(
        select(NotebookModel, JobModel)
        .join(JobModel, JobModel.id == NotebookModel.job_id)
        .where(
            NotebookModel.stopped_at.is_(None),
            NotebookModel.token.is_not(None),
            JobModel.status == "running",
            JobModel.gpus > 0,  # without GPUs there is nothing to give back
        )
    ).all()
    found = endpoints_of(session, executor, [job.id for _, job in rows])
    return [
        Look(
            nb.id,
            job.id,
            _kernels_url(found[job.id].url, nb.id),
            nb.token,
            nb.active_at,
            found[job.id].via,
        )
        for nb, job in rows
        if job.id in found
    ]


def _kernels_url(url: str, notebook_id: int) -> str:
    return f"{url}{base_path(notebook_id)}api/kernels?no_track_activity=1"


def kernels_of(answer: Any) -> list[Kernel]:
    """The kernels in JupyterLab's answer to ``/api/kernels`` (its JSON); raises
    TypeError, KeyError or ValueError on an answer of another shape."""
    return [_kernel(item) for item in answer]


def judge_idleness(
    session: Session,
    answered: list[Look],
    kernels: dict[int, list[Kernel] | None],
    now: float,
    idle_seconds: float,
) -> list[Seen]:
    """Step (2), with the kernels asked: each answering notebook judged by its kernels and
    its GPU samples; its first answer starts its idle time."""
    seen = []
    for look in answered:
        if look.active_at is None:  # its first answer: the idle time starts now
            seen.append(Seen(look, Verdict(now, False), True))
            continue
        gpu = metrics.gpu_busy(session, look.job_id, look.active_at)
        found = kernels[look.notebook_id] or []
        verdict = judge(found, look.active_at, gpu, now, idle_seconds)
        seen.append(Seen(look, verdict, gpu is not None))
    return seen


def record_idleness(session: Session, seen: list[Seen], now: float, idle_seconds: float) -> int:
    """Step (3): record what was seen and stop the notebooks idle too long, each guarded by
    its job id (a notebook stopped or resumed meanwhile is left alone); how many stopped."""
    stopped = 0
    for found in seen:
        notebook = session.get(NotebookModel, found.look.notebook_id)
        if notebook is None or notebook.job_id != found.look.job_id:
            continue  # resumed meanwhile: another job
        if notebook.stopped_at is not None:
            continue
        notebook.active_at = found.verdict.active_at
        if found.verdict.stop:
            message = idle_message(idle_seconds, found.gpu_reports)
            notebooks.stop(session, notebook, now, StopCause.IDLE, message)
            stopped += 1
    return stopped


def _kernel(item: dict[str, Any]) -> Kernel:
    stamp = item.get("last_activity")
    at = datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None
    return Kernel(busy=item.get("execution_state") == "busy", last_activity=at)
