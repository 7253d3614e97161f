"""The idle watch: gives back the GPUs of notebooks nobody uses.

Owned by the platform and started beside its control loop, it looks every
``min(60 s, idle time / 4)`` at each running notebook that holds GPUs, in three steps that
hold no transaction across I/O: (1) read the notebooks and where they serve; (2) ask each
JupyterLab for its kernels (``/api/kernels``, with the notebook's token, without counting
as activity) and read its GPU samples (``services.metrics.gpu_busy``); (3) record what it
saw, and stop the notebooks idle for ``notebook_idle_seconds`` (``domain.notebooks.judge``),
each guarded by its job id so that a notebook stopped or resumed meanwhile is left alone.
The idle time counts from JupyterLab's first answer to the watch: its own start-up is not
idleness.

It also records as stopped the notebooks whose job ended by itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import select

import gpupool.services.notebooks._notebooks as notebooks
from gpupool.domain.notebooks import Kernel, StopCause, Verdict, base_path, idle_message, judge
from gpupool.scheduler.types import Clock
from gpupool.services import metrics
from gpupool.services.core import Watch
from gpupool.services.jobs import Via, client_via, endpoints_of
from gpupool.store.db import Database
from gpupool.store.models import JobModel, NotebookModel

log = logging.getLogger(__name__)

LONGEST_INTERVAL = 60.0
ASK_TIMEOUT = httpx.Timeout(5.0)


@dataclass(frozen=True)
class Look:
    """A running notebook with GPUs, as step (1) read it."""

    notebook_id: int
    job_id: int
    url: str  # its JupyterLab's kernels, through its own port
    token: str
    active_at: float | None  # None: its JupyterLab never answered the watch yet
    via: Via = None  # the way to it, when it has a network of its own (services.jobs.endpoint_of)


@dataclass(frozen=True)
class Seen:
    look: Look
    verdict: Verdict
    gpu_reports: bool  # its GPUs report utilisation (False: declared GPUs)


class IdleWatch(Watch):
    """A look every ``min(60 s, idle time / 4)`` in a daemon thread of its own, until
    stopped; a failed look is logged and the watch goes on."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        wake: Callable[[], None],
        idle_seconds: float,
        client: httpx.Client | None = None,
    ) -> None:
        """``wake``: tells the control loop to schedule now (GPUs were given back)."""
        self.db, self.clock, self.wake_loop = db, clock, wake
        self.idle_seconds = idle_seconds
        self.client = client or httpx.Client(timeout=ASK_TIMEOUT, trust_env=False)
        interval = min(LONGEST_INTERVAL, self.idle_seconds / 4)
        super().__init__("gpupool-idle", "the notebooks' idleness", interval)

    def stop(self) -> None:
        super().stop()
        self.client.close()

    def tick(self) -> int:
        """One look at every running notebook; how many were stopped for idling."""
        now = self.clock.now()
        with self.db.session() as session:
            notebooks.settle(session, now)
        looks = self.load()
        kernels = {look.notebook_id: self.kernels(look) for look in looks}
        answered = [look for look in looks if kernels[look.notebook_id] is not None]
        seen = self.judge(answered, kernels)
        stopped = self.apply(seen)
        if stopped:
            self.wake_loop()
        return stopped

    # -- (1) load --------------------------------------------------------------------------

    def load(self) -> list[Look]:
        with self.db.reader() as session:
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
            found = endpoints_of(session, [job.id for _, job in rows])
            return [
                Look(
                    nb.id,
                    job.id,
                    self._kernels_url(found[job.id].url, nb.id),
                    nb.token,
                    nb.active_at,
                    found[job.id].via,
                )
                for nb, job in rows
                if job.id in found
            ]

    @staticmethod
    def _kernels_url(url: str, notebook_id: int) -> str:
        return f"{url}{base_path(notebook_id)}api/kernels?no_track_activity=1"

    # -- (2) ask ---------------------------------------------------------------------------

    def kernels(self, look: Look) -> list[Kernel] | None:
        """The notebook's kernels, or None when its JupyterLab does not answer (still
        starting, or gone: nothing is concluded from silence)."""
        headers = {"Authorization": f"token {look.token}"}
        try:
            if look.via is None:
                answer = self.client.get(look.url, headers=headers)
            else:  # a network of its own: through its runner's socket
                with client_via(look.via, ASK_TIMEOUT) as client:
                    answer = client.get(look.url, headers=headers)
            answer.raise_for_status()
            return [_kernel(item) for item in answer.json()]
        except (httpx.HTTPError, OSError, ValueError, TypeError, KeyError) as error:
            log.info("notebook %d: no answer from its JupyterLab (%s)", look.notebook_id, error)
            return None

    def judge(self, looks: list[Look], kernels: dict[int, list[Kernel] | None]) -> list[Seen]:
        now, seen = self.clock.now(), []
        with self.db.reader() as session:
            for look in looks:
                if look.active_at is None:  # its first answer: the idle time starts now
                    seen.append(Seen(look, Verdict(now, False), True))
                    continue
                gpu = metrics.gpu_busy(session, look.job_id, look.active_at)
                found = kernels[look.notebook_id] or []
                verdict = judge(found, look.active_at, gpu, now, self.idle_seconds)
                seen.append(Seen(look, verdict, gpu is not None))
        return seen

    # -- (3) apply -------------------------------------------------------------------------

    def apply(self, seen: list[Seen]) -> int:
        stopped, now = 0, self.clock.now()
        with self.db.session() as session:
            for found in seen:
                notebook = session.get(NotebookModel, found.look.notebook_id)
                if notebook is None or notebook.job_id != found.look.job_id:
                    continue  # resumed meanwhile: another job
                if notebook.stopped_at is not None:
                    continue
                notebook.active_at = found.verdict.active_at
                if found.verdict.stop:
                    message = idle_message(self.idle_seconds, found.gpu_reports)
                    notebooks.stop(session, notebook, now, StopCause.IDLE, message)
                    stopped += 1
        return stopped


def _kernel(item: dict[str, Any]) -> Kernel:
    stamp = item.get("last_activity")
    at = datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None
    return Kernel(busy=item.get("execution_state") == "busy", last_activity=at)
