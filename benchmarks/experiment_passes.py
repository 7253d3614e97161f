"""Aim 4 of benchmarks/experiments.py: the experiments pipeline's pass at 1,000 trials, and
the rebuild of a 1,000-trial experiment from the tables.

In-process, on a real SQLite database through gpupool's store: ``services.experiments``'
``Progress`` (the pipeline's rules, as the server's experiments thread runs them) steps one
experiment of the synthetic curve family (``trials/curves.py``: three parameters,
successive halving at rungs 1, 3 and 9 of 27 epochs, 8 trials at once). Between passes a
simulated pool plays the trials' jobs (no processes): it starts the pending ones, adds an
epoch of points to each running one (``job_metrics`` rows; three while the experiment
grows), ends those at their last epoch and those the pass stopped. The experiment is first
grown to ``at`` trials this way, then each of the next passes is timed: the whole pass
(load, decide and ask, apply) and, inside it, the decision alone (judging the rungs and
Optuna's asks, in memory) and each ask. Then the pipeline's state is dropped, as at a
server's start, and one pass timed: it rebuilds the study, every trial's curve and verdict,
from the tables.

Each is timed twice: by the wall clock (the aim's figure) and by the CPU time of the thread
that runs it (``time.thread_time``): on a machine shared with other work the wall clock's
p95 is mostly the waits for a core, the CPU time is what the pass itself costs. The grid
sampler gets the same space on a grid (steps of 0.05; ``lr`` linear: a grid has no log).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from trials.curves import loss

from gpupool.domain.experiments import ExperimentSpec
from gpupool.domain.jobs import Role
from gpupool.scheduler.types import GpuCapacity, NodeCapacity
from gpupool.services import experiments, jobs
from gpupool.services.core import Principal
from gpupool.services.experiments import _progress
from gpupool.services.experiments._studies import Study
from gpupool.settings import Settings
from gpupool.store.db import Database, prepare
from gpupool.store.models import (
    AttemptModel,
    ExperimentModel,
    JobMetricModel,
    JobModel,
    MembershipModel,
    MetricCursorModel,
    TeamModel,
    TrialModel,
    UserModel,
)

EPOCHS, CONCURRENT, FAMILY = 27, 8, 1
# epochs each running trial reports between two passes: 3 while the experiment grows (fewer
# passes), 1 while passes are timed (about one trial ends, and one is asked for, a pass)
GROWING, TIMED = 3, 1
GIB = 1024**3


@dataclass
class Passes:
    """The timings of one sampler's run, in seconds."""

    sampler: str
    built: float  # growing the experiment to ``at`` trials, all its passes
    passes: list[float] = field(default_factory=list)
    decisions: list[float] = field(default_factory=list)
    asks: list[float] = field(default_factory=list)  # Optuna's asks, each
    # the same, in the CPU time of the thread that ran them
    passes_cpu: list[float] = field(default_factory=list)
    decisions_cpu: list[float] = field(default_factory=list)
    asks_cpu: list[float] = field(default_factory=list)
    rebuilds: list[float] = field(default_factory=list)
    trials: int = 0
    points: int = 0


def measure(sampler: str, at: int, timed: int, rebuilds: int, scratch: Path) -> Passes:
    """Grow an experiment of ``sampler`` to ``at`` trials, time ``timed`` passes, then
    ``rebuilds`` rebuilds (each: the pipeline's state dropped, one pass)."""
    # never short of trials to make: a pass may ask for several
    with _pool(scratch / sampler, sampler, at + CONCURRENT * (timed + rebuilds)) as pool:
        began = time.perf_counter()
        pool.grow(lambda: pool.made() >= at)
        result = Passes(sampler, time.perf_counter() - began)
        pool.epochs_a_pass = TIMED
        timing_asks = _timing(Study, "ask", result.asks, result.asks_cpu)
        with _timing(_progress, "decide", result.decisions, result.decisions_cpu), timing_asks:
            for _ in range(timed):
                wall, cpu = pool.step()
                result.passes.append(wall)
                result.passes_cpu.append(cpu)
        for _ in range(rebuilds):
            pool.progress = experiments.Progress()
            result.rebuilds.append(pool.step()[0])
        result.trials, result.points = pool.made(), pool.points
        return result


@dataclass
class _Clock:
    at: float = 1_000_000.0

    def now(self) -> float:
        return self.at


@dataclass
class _Loop:
    """The control loop as the pipeline sees it: the nodes, and calls it ignores."""

    nodes: tuple[NodeCapacity, ...]

    def recent_nodes(self) -> tuple[NodeCapacity, ...]:
        return self.nodes

    def wake(self) -> None:
        pass

    def stops_recorded(self) -> None:
        pass


@dataclass
class _Ctx:
    db: Database
    clock: _Clock
    settings: Settings
    loop: _Loop


@dataclass
class _Pool:
    """The database, the pipeline's rules and a simulated pool playing the trials' jobs."""

    ctx: _Ctx
    experiment_id: int
    progress: experiments.Progress = field(default_factory=experiments.Progress)
    points: int = 0
    epochs_a_pass: int = GROWING

    def step(self) -> tuple[float, float]:
        """The world moves on (not timed), then one pass of the pipeline (timed: wall clock
        and CPU time)."""
        if not self.progress.again:  # else the pipeline passes again at once, as a server's
            self.ctx.clock.at += 1.0
            self._play()
        began, cpu = time.perf_counter(), time.thread_time()
        self.progress.step(self.ctx)
        return time.perf_counter() - began, time.thread_time() - cpu

    def grow(self, done: Callable[[], bool]) -> None:
        while not done():
            self.step()

    def made(self) -> int:
        with self.ctx.db.reader() as session:
            row = session.get(ExperimentModel, self.experiment_id)
            assert row is not None and row.status == "running", row and row.message
            return row.trials_made

    def _play(self) -> None:
        now = self.ctx.clock.now()
        with self.ctx.db.session() as session:
            query = (
                select(TrialModel, JobModel)
                .join(JobModel, JobModel.id == TrialModel.job_id)
                .where(TrialModel.experiment_id == self.experiment_id)
                .where(JobModel.status.in_(("pending", "running")))
            )
            for trial, job in session.execute(query).all():
                if job.status == "pending":
                    _start(session, job, now)
                elif trial.state == "early_stopped" or _stop_asked(session, job.id):
                    _end(session, job, "cancelled", "EarlyStopped", now)
                else:
                    self._train(session, trial, job, now)

    def _train(self, session: Any, trial: TrialModel, job: JobModel, now: float) -> None:
        last = session.scalar(
            select(JobMetricModel.step)
            .where(JobMetricModel.job_id == job.id)
            .order_by(JobMetricModel.id.desc())
            .limit(1)
        )
        done = int(last or 0)
        for epoch in range(done + 1, min(EPOCHS, done + self.epochs_a_pass) + 1):
            value = loss(trial.params, epoch, FAMILY)
            session.add(JobMetricModel(job_id=job.id, attempt=1, name="loss", step=epoch,
                                       at=now, value=value))  # fmt: skip
            self.points += 1
        if done + self.epochs_a_pass >= EPOCHS:
            _end(session, job, "succeeded", "Succeeded", now)


def _start(session: Any, job: JobModel, now: float) -> None:
    job.status, job.started_at, job.attempts = "running", now, 1
    session.add(AttemptModel(job_id=job.id, number=1, node="bench", placement={},
                             status="running", created_at=now, started_at=now))  # fmt: skip
    session.add(MetricCursorModel(job_id=job.id, attempt=1, position=0, done=False))


def _stop_asked(session: Any, job_id: int) -> bool:
    reason = session.scalar(select(AttemptModel.stop_reason).where(AttemptModel.job_id == job_id))
    return reason is not None


def _end(session: Any, job: JobModel, status: str, reason: str, now: float) -> None:
    job.status, job.reason, job.ended_at = status, reason, now
    job.message = "ended by the simulated pool"
    session.execute(
        update(AttemptModel)
        .where(AttemptModel.job_id == job.id)
        .values(status=status, ended_at=now)
    )
    session.execute(
        update(MetricCursorModel).where(MetricCursorModel.job_id == job.id).values(done=True)
    )


@contextmanager
def _pool(directory: Path, sampler: str, max_trials: int) -> Iterator[_Pool]:
    directory.mkdir(parents=True)
    settings = Settings(data_dir=directory)
    database = Database(settings.database)
    prepare(database)
    gpus = tuple(GpuCapacity(f"GPU-{i}", i, "A100-SXM4-80GB", 80 * GIB) for i in range(8))
    nodes = (NodeCapacity("bench", gpus, 64.0, 256 * GIB),)
    ctx = _Ctx(database, _Clock(), settings, _Loop(nodes))
    try:
        yield _Pool(ctx, _experiment(ctx, sampler, max_trials))
    finally:
        database.dispose()


_SPACE = {
    "x": {"type": "float", "low": 0.0, "high": 1.0},
    "y": {"type": "float", "low": 0.0, "high": 1.0},
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
}
_GRID = {
    "x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.05},
    "y": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.05},
    "lr": {"type": "float", "low": 0.05, "high": 1.0, "step": 0.05},
}


def _experiment(ctx: _Ctx, sampler: str, max_trials: int) -> int:
    spec = ExperimentSpec.model_validate(
        {
            "name": f"passes-{sampler}",
            "objective": {"metric": "loss"},
            "parameters": _GRID if sampler == "grid" else _SPACE,
            "sampler": {"name": sampler, "seed": random.Random(sampler).randrange(2**31)},
            "stopping": {"name": "asha", "max_time": EPOCHS, "grace": 1, "reduction_factor": 3},
            "max_trials": max_trials,
            "max_concurrent": CONCURRENT,
            "max_failed": max_trials,
            "trial": {"command": ["python", "train.py"], "resources": {"gpus": 1}},
        }
    )
    now = ctx.clock.now()
    with ctx.db.session() as session:
        session.add(TeamModel(id=1, name="ml", created_at=now))
        session.add(UserModel(id=1, name="ada", role="member", created_at=now))
        session.flush()  # they first: the membership refers to them
        session.add(MembershipModel(user_id=1, team_id=1))
        who = Principal(user_id=1, name="ada", role=Role.MEMBER, team_ids=frozenset({1}))
        limits = jobs.JobLimits.of(ctx.settings)
        row = experiments.new_experiment(session, who, spec, ctx.loop.nodes, now, limits)
        return row.id


@contextmanager
def _timing(owner: Any, name: str, into: list[float], cpu: list[float]) -> Iterator[None]:
    """Each call of ``owner.name`` timed into ``into`` (wall clock) and ``cpu`` (CPU time),
    for the length of the measurement (the pipeline's decision, ``_progress.decide``;
    Optuna's asks, ``Study.ask``)."""
    original = getattr(owner, name)

    def timed(*args: Any) -> Any:
        began, cpu_began = time.perf_counter(), time.thread_time()
        try:
            return original(*args)
        finally:
            into.append(time.perf_counter() - began)
            cpu.append(time.thread_time() - cpu_began)

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)
