"""The pool's own history as a trace the simulator reads (its generic CSV): each job that
ran, when it was submitted, the run time it got over all its attempts, its GPUs, team, user
and other needs; a job still running is censored (its run time so far is a lower bound);
a job that ended has its observed completion time (submit to end), against which a replay's
fidelity is measured. Jobs that never started are left out: nothing says how long they need.
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus
from gpupool.sim.traces import Trace, load_generic
from gpupool.store.models import AttemptModel, JobModel, TeamModel, UserModel

COLUMNS = (
    "submit", "duration", "gpus", "team", "user", "cpus", "memory", "gpu_memory", "gpu_type",
    "censored", "jct",
)  # fmt: skip
MIN_DURATION = 0.001  # seconds: a job that started and ended within the clock's resolution


@dataclass(frozen=True)
class PastJob:
    """One job of the history: ``submit`` and ``ended`` are Unix times; ``duration``: the
    seconds its attempts ran (to ``now`` for one still running)."""

    job_id: int
    submit: float
    duration: float
    gpus: float
    team: str
    user: str
    cpus: float
    memory: int | None
    gpu_memory: int | None
    gpu_type: tuple[str, ...]
    censored: bool
    ended: float | None

    def row(self) -> list[str]:
        jct = "" if self.censored or self.ended is None else f"{self.ended - self.submit:.3f}"
        return [
            f"{self.submit:.3f}", f"{max(self.duration, MIN_DURATION):.3f}", f"{self.gpus:g}",
            self.team, self.user, f"{self.cpus:g}", _bytes(self.memory), _bytes(self.gpu_memory),
            "|".join(self.gpu_type), "1" if self.censored else "0", jct,
        ]  # fmt: skip


def past_jobs(session: Session, since: float, until: float, now: float) -> list[PastJob]:
    """The jobs submitted in [since, until) that ran, oldest first."""
    rows = session.execute(
        select(JobModel, TeamModel.name, UserModel.name)
        .join(TeamModel, TeamModel.id == JobModel.team_id)
        .join(UserModel, UserModel.id == JobModel.user_id)
        .where(JobModel.submitted_at >= since, JobModel.submitted_at < until)
        .order_by(JobModel.submitted_at, JobModel.id)
    ).all()
    ran = _run_times(session, [job.id for job, _team, _user in rows], now)
    return [_past(job, team, user, ran[job.id], now) for job, team, user in rows if job.id in ran]


def csv_text(jobs: list[PastJob]) -> str:
    """The generic CSV of ``jobs`` (``gpupool simulate --trace csv:FILE`` reads it)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(job.row() for job in jobs)
    return out.getvalue()


def trace_of(jobs: list[PastJob], workdir: Path) -> Trace:
    """``jobs`` read back by the simulator's own reader of the generic CSV, so that a tune
    replays exactly what an export gives (the trace's job N is ``jobs[N - 1]``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".csv", dir=workdir, delete=True) as file:
        file.write(csv_text(jobs))
        file.flush()
        return load_generic(file.name)


def _run_times(session: Session, job_ids: list[int], now: float) -> dict[int, float]:
    """Job id -> the seconds its attempts ran, for the jobs with an attempt that started."""
    ran: dict[int, float] = defaultdict(float)
    for chunk in _chunks(job_ids, 500):
        for job_id, started, ended in session.execute(
            select(AttemptModel.job_id, AttemptModel.started_at, AttemptModel.ended_at).where(
                AttemptModel.job_id.in_(chunk), AttemptModel.started_at.is_not(None)
            )
        ):
            ran[job_id] += max(0.0, (ended if ended is not None else now) - started)
    return dict(ran)


def _past(job: JobModel, team: str, user: str, ran: float, now: float) -> PastJob:
    resources = (job.spec or {}).get("resources") or {}
    censored = not JobStatus(job.status).is_final
    gpu_types = (job.spec or {}).get("gpu_types") or ()
    return PastJob(
        job_id=job.id, submit=job.submitted_at, duration=ran, gpus=job.gpus, team=team,
        user=user, cpus=float(resources.get("cpus") or 1.0),
        memory=resources.get("memory_bytes"), gpu_memory=resources.get("gpu_memory_bytes"),
        gpu_type=tuple(gpu_types),
        censored=censored, ended=None if censored else (job.ended_at or now),
    )  # fmt: skip


def _bytes(count: int | None) -> str:
    return "" if count is None else str(int(count))


def _chunks(values: list[int], size: int) -> list[list[int]]:
    return [values[i : i + size] for i in range(0, len(values), size)]
