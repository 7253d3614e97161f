"""One replay of a window of history under one setting, and what it scores; fidelity.

A window is the jobs submitted in it, replayed from an empty pool: what ran across its
start is not known from the trace (its jobs' observed service would have to be split),
and the pool fills within hours of a window of days. The jobs finished before the window
give the service distribution a "gittins" replay starts from.

Censored jobs (still running when the history was exported) are replayed for the service
seen so far, their lower bound, and left out of every score: so the others meet them as
they really did, while the pool held them, but a JCT that no replay can know is not
scored. (Running them longer would guess; dropping them would free GPUs they held.)

Every replay runs a policy as the server runs it (``served``): a cycle the moment a running
job crosses a level's threshold or a waiting job starves (``Policy.level_wakeups``), as the
server's loop, which runs every half second while jobs wait, sees it; and no explanations,
which decide nothing. (``gpupool simulate`` runs a policy's crossings at the next arrival or
end, unless told: on Philly team-months that alone moves the default's average JCT by up to
30 %, see docs/scheduling.md, "Self-tuning".)

``ReplayTask`` carries everything one replay needs and ``run_task`` is a plain top-level
function, so a process pool runs it as it is: no process keeps anything between tasks.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpupool.domain.policy import Policy
from gpupool.scheduler.types import NodeCapacity, TeamQuota
from gpupool.sim.engine import JobRecord, SimResult, simulate
from gpupool.sim.metrics import mean, percentile, worst_team_slowdown
from gpupool.sim.traces import Trace, TraceJob
from gpupool.sim.tuning._report import Fidelity, JobError, Scores

FIDELITY_LIMIT = 0.25  # the median relative JCT error above which tuning is refused
WORST_SHOWN = 20  # jobs listed in a fidelity's ``worst``


@dataclass(frozen=True)
class Setup:
    """What every replay of a tuning shares: the pool, its teams and the replay's mode."""

    nodes: tuple[NodeCapacity, ...]
    quotas: tuple[TeamQuota, ...] = ()
    placement: str = "node"
    restart_cost: float = 60.0


@dataclass(frozen=True)
class ReplayTask:
    """One replay: the window's jobs under a policy, after the service seen before it."""

    jobs: tuple[TraceJob, ...]
    policy: Policy
    setup: Setup
    service_history: tuple[float, ...] = ()


def window_jobs(trace: Trace | Sequence[TraceJob], start: float, end: float) -> tuple:
    """The jobs submitted in [start, end)."""
    jobs = trace.jobs if isinstance(trace, Trace) else trace
    return tuple(job for job in jobs if start <= job.submit < end)


def service_before(trace: Trace | Sequence[TraceJob], start: float) -> tuple[float, ...]:
    """The GPU-seconds of the jobs that ended before ``start`` (censored ones left out)."""
    jobs = trace.jobs if isinstance(trace, Trace) else trace
    return tuple(
        job.request.gpu_count * job.duration
        for job in jobs
        if not job.censored and job.submit + job.duration <= start
    )


def served(policy: Policy) -> Policy:
    """``policy`` as the server runs it: crossings seen at once, nothing explained."""
    return replace(policy, level_wakeups=True, explain=False)


def replay(task: ReplayTask) -> SimResult:
    setup = task.setup
    return simulate(
        task.jobs,
        setup.nodes,
        restart_cost=setup.restart_cost,
        placement=setup.placement,
        settings=served(task.policy),
        quotas=setup.quotas,
        service_history=task.service_history,
    )


def run_task(task: ReplayTask) -> Scores:
    """A replay's scores (the function a worker process runs)."""
    return score(replay(task), task.jobs)


def score(result: SimResult, jobs: Sequence[TraceJob]) -> Scores:
    """The figures of the jobs a replay scores: those that ran and are not censored."""
    censored = {job.job_id for job in jobs if job.censored}
    records = [record for record in result.records if record.job_id not in censored]
    jcts = [record.jct for record in records]
    waits = [record.queueing_delay for record in records]
    return Scores(
        jobs=len(records),
        avg_jct=mean(jcts),
        median_jct=statistics.median(jcts) if jcts else 0.0,
        p95_jct=percentile(jcts, 95),
        avg_wait=mean(waits),
        p95_wait=percentile(waits, 95),
        worst_team_slowdown=worst_team_slowdown(records)[1],
        preemptions=result.preemptions,
        unscheduled=len(result.unscheduled),
    )


def fidelity(
    trace: Trace | Sequence[TraceJob],
    nodes: Sequence[NodeCapacity],
    policy: Policy,
    *,
    quotas: Sequence[TeamQuota] = (),
    placement: str = "node",
    restart_cost: float = 60.0,
) -> Fidelity:
    """Replay ``trace`` (its jobs with an observed JCT, ``TraceJob.observed_jct``) under
    ``policy`` and measure each job's JCT error against what really happened."""
    jobs = trace.jobs if isinstance(trace, Trace) else tuple(trace)
    setup = Setup(tuple(nodes), tuple(quotas), placement, restart_cost)
    return fidelity_of(replay(ReplayTask(jobs, policy, setup)).records, jobs)


def fidelity_of(records: Sequence[JobRecord], jobs: Sequence[TraceJob]) -> Fidelity:
    """The per-job JCT errors of a replay's ``records`` against the jobs' observed JCTs."""
    observed = {
        job.job_id: job.observed_jct
        for job in jobs
        if job.observed_jct is not None and not job.censored
    }
    errors = [
        JobError(record.job_id, seen, record.jct, abs(record.jct - seen) / max(seen, 1.0))
        for record in records
        if (seen := observed.get(record.job_id)) is not None
    ]
    values = [error.error for error in errors]
    worst = sorted(errors, key=lambda error: (-error.error, error.job_id))[:WORST_SHOWN]
    return Fidelity(
        jobs=len(errors),
        median_error=statistics.median(values) if values else None,
        p90_error=percentile(values, 90) if values else None,
        mean_error=mean(values) if values else None,
        worst=worst,
        limit=FIDELITY_LIMIT,
    )
