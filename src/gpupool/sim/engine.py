"""Trace replay: a discrete-event simulation on a virtual clock, driving the real scheduler.

Events are job arrivals (the trace, in submit order) and completions (a heap). At each
distinct event time the engine applies every event at that time, then asks the policy once
for decisions and starts each placement; a started job ends ``duration`` seconds later. The
policy is any ``Callable[[Snapshot, Clock], Decisions]``, by default
``gpupool.scheduler.schedule`` itself: the simulator has no scheduling logic of its own.

A snapshot is cheap to build: the allocations of running jobs and the pending jobs are kept
in dicts (pending in arrival order) and only turned into tuples for the call.

A job no node could ever hold is refused at submit, as the API refuses it (the scheduler's
own ``infeasible_reason``). A job still pending when nothing runs and nothing more arrives
can never start: the replay stops and reports it unscheduled, with the scheduler's reason.

Not replayed yet, for want of scheduler support: preemption (``Replay.apply_preemptions`` is
the hook) and a job's allowed GPU models (``TraceJob.gpu_types``: the scheduler's
``PendingJob`` has no such field, so every job may run on any GPU).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.units import GiB, parse_bytes
from gpupool.scheduler import infeasible_reason, schedule
from gpupool.scheduler.types import (
    Allocation,
    Clock,
    Decisions,
    GpuCapacity,
    GpuShare,
    NodeCapacity,
    PendingJob,
    Placement,
    Snapshot,
)

if TYPE_CHECKING:
    from gpupool.sim.traces import TraceJob

Policy = Callable[[Snapshot, Clock], Decisions]

STUCK_MESSAGE = "still pending when nothing ran and nothing more was to arrive"


class VirtualClock:
    """The simulation's clock: it reads the current event time and only moves forward."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, time: float) -> None:
        if time < self._now:
            raise ValueError(f"the virtual clock cannot go back from {self._now} to {time}")
        self._now = time


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job that ran: when it was submitted, started and ended, and what it held."""

    job_id: int
    team: str
    submit: float
    duration: float
    start: float
    end: float
    gpus: float  # GPUs held: a whole count, or the share of one GPU
    node: str
    shares: tuple[GpuShare, ...]

    @property
    def jct(self) -> float:
        """Job completion time: submit to end."""
        return self.end - self.submit

    @property
    def queueing_delay(self) -> float:
        return self.start - self.submit


@dataclass(frozen=True, slots=True)
class UnscheduledJob:
    """A job that never started, and why."""

    job_id: int
    team: str
    submit: float
    duration: float
    gpus: float  # GPUs asked for
    reason: str


@dataclass(frozen=True, slots=True)
class SimResult:
    """What a replay produced: a record per job that ran, and the jobs that never could."""

    records: tuple[JobRecord, ...]  # in job id order
    unscheduled: tuple[UnscheduledJob, ...]  # in job id order
    total_gpus: int
    cycles: int  # calls to the policy
    preemptions: int = 0  # always 0 until the scheduler decides preemptions
    restart_cost: float = 0.0


def simulate(
    trace_jobs: Iterable[TraceJob],
    nodes: Sequence[NodeCapacity],
    policy: Policy = schedule,
    *,
    restart_cost: float = 0.0,
) -> SimResult:
    """Replay ``trace_jobs`` on ``nodes`` under ``policy``; deterministic for equal inputs.

    ``restart_cost`` (seconds of work a preempted job redoes) is kept for when the scheduler
    decides preemptions; see ``Replay.apply_preemptions``.
    """
    if restart_cost < 0:
        raise ValueError("restart_cost must be 0 or more seconds")
    replay = Replay(nodes, policy, restart_cost)
    replay.run(trace_jobs)
    return replay.result()


class Replay:
    """The state of one replay: clock, event queues, pending and running jobs, records."""

    def __init__(self, nodes: Sequence[NodeCapacity], policy: Policy, restart_cost: float):
        self.nodes = tuple(nodes)
        self.policy = policy
        self.restart_cost = restart_cost
        self.clock = VirtualClock()
        self.arrivals: list[TraceJob] = []
        self.next_arrival = 0
        self.completions: list[tuple[float, int]] = []  # heap of (end, job id)
        self.jobs: dict[int, TraceJob] = {}
        self.pending: dict[int, PendingJob] = {}  # insertion (arrival) order
        self.running: dict[int, Allocation] = {}
        self.records: dict[int, JobRecord] = {}
        self.unscheduled: dict[int, UnscheduledJob] = {}
        self.cycles = 0
        self.preemptions = 0
        self.last_decisions = Decisions()
        self._refusals = RefusalCache([node for node in self.nodes if node.schedulable])

    def run(self, trace_jobs: Iterable[TraceJob]) -> None:
        """Load the arrivals, then step through event times until no event is left."""
        self.arrivals = sorted(trace_jobs, key=lambda job: (job.submit, job.job_id))
        self.jobs = _index_by_id(self.arrivals)
        while (time := self.next_event_time()) is not None:
            self.clock.advance_to(time)
            self.apply_events(time)
            if self.pending:  # with nothing pending a cycle has nothing to decide
                self.run_cycle()
            if self.is_stuck():
                self.give_up()

    def next_event_time(self) -> float | None:
        times = []
        if self.next_arrival < len(self.arrivals):
            times.append(self.arrivals[self.next_arrival].submit)
        if self.completions:
            times.append(self.completions[0][0])
        return min(times, default=None)

    def apply_events(self, time: float) -> None:
        """Free the jobs ending at ``time``, then queue the jobs arriving at it."""
        while self.completions and self.completions[0][0] <= time:
            _, job_id = heapq.heappop(self.completions)
            del self.running[job_id]
        arrivals = self.arrivals
        while self.next_arrival < len(arrivals) and arrivals[self.next_arrival].submit <= time:
            self.arrive(arrivals[self.next_arrival])
            self.next_arrival += 1

    def arrive(self, job: TraceJob) -> None:
        """Queue a job, or refuse it when no node could ever hold it (as the API does)."""
        reason = self._refusals.reason(job.request)
        if reason is not None:
            self.unscheduled[job.job_id] = _unscheduled(job, reason)
            return
        self.pending[job.job_id] = PendingJob(
            job.job_id, job.team, job.user, 0, job.submit, job.request
        )

    def run_cycle(self) -> None:
        """Call the policy once on a snapshot of now, and start what it placed."""
        snapshot = Snapshot(self.nodes, tuple(self.running.values()), tuple(self.pending.values()))
        decisions = self.policy(snapshot, self.clock)
        self.cycles += 1
        self.last_decisions = decisions
        self.apply_preemptions(decisions)
        for placement in decisions.placements:
            self.start(placement)

    def apply_preemptions(self, decisions: Decisions) -> None:
        """Hook for the scheduler rewrite: stop the victims the decisions name.

        ``Decisions`` carries no preemptions yet. When it does, each victim is stopped here:
        its allocation freed, its completion event dropped, and it is queued again with the
        work it has left plus ``restart_cost`` seconds; ``preemptions`` counts them.
        """
        if getattr(decisions, "preemptions", None):
            raise NotImplementedError(
                "the simulator does not replay preemptions yet: see Replay.apply_preemptions"
            )

    def start(self, placement: Placement) -> None:
        job_id = placement.job_id
        if self.pending.pop(job_id, None) is None:
            raise ValueError(f"the policy placed job {job_id}, which is not pending")
        job, now = self.jobs[job_id], self.clock.now()
        self.running[job_id] = Allocation(
            job_id, placement.node, placement.gpus, placement.cpus, placement.memory_bytes
        )
        heapq.heappush(self.completions, (now + job.duration, job_id))
        self.records[job_id] = _record(job, placement, now)

    def is_stuck(self) -> bool:
        """Jobs wait, yet nothing runs and nothing more arrives: they can never start."""
        no_arrivals = self.next_arrival >= len(self.arrivals)
        return bool(self.pending) and not self.running and no_arrivals

    def give_up(self) -> None:
        reasons = self.last_decisions.pending
        for job_id in list(self.pending):
            found = reasons.get(job_id)
            reason = found.message if found is not None else STUCK_MESSAGE
            self.unscheduled[job_id] = _unscheduled(self.jobs[job_id], reason)
        self.pending.clear()

    def result(self) -> SimResult:
        return SimResult(
            records=tuple(self.records[key] for key in sorted(self.records)),
            unscheduled=tuple(self.unscheduled[key] for key in sorted(self.unscheduled)),
            total_gpus=sum(len(node.gpus) for node in self.nodes if node.schedulable),
            cycles=self.cycles,
            preemptions=self.preemptions,
            restart_cost=self.restart_cost,
        )


class RefusalCache:
    """``infeasible_reason`` against the given nodes, worked out once per request shape."""

    def __init__(self, nodes: Sequence[NodeCapacity]) -> None:
        self._nodes = nodes
        self._reasons: dict[tuple[object, ...], str | None] = {}

    def reason(self, request: ResourceRequest) -> str | None:
        key = (request.gpus, request.gpu_memory_bytes, request.cpus, request.memory_bytes)
        if key not in self._reasons:
            self._reasons[key] = infeasible_reason(request, self._nodes)
        return self._reasons[key]


def _index_by_id(jobs: Sequence[TraceJob]) -> dict[int, TraceJob]:
    by_id: dict[int, TraceJob] = {}
    for job in jobs:
        if job.job_id in by_id:
            raise ValueError(f"job id {job.job_id} appears twice in the trace")
        if job.duration < 0:
            raise ValueError(f"job {job.job_id} has a negative duration")
        by_id[job.job_id] = job
    return by_id


def _record(job: TraceJob, placement: Placement, start: float) -> JobRecord:
    return JobRecord(
        job_id=job.job_id,
        team=job.team,
        submit=job.submit,
        duration=job.duration,
        start=start,
        end=start + job.duration,
        gpus=sum(part.share for part in placement.gpus),
        node=placement.node,
        shares=placement.gpus,
    )


def _unscheduled(job: TraceJob, reason: str) -> UnscheduledJob:
    return UnscheduledJob(
        job.job_id, job.team, job.submit, job.duration, job.request.gpu_count, reason
    )


# -- clusters --------------------------------------------------------------------------------

DEFAULT_MODEL = "GPU"
DEFAULT_GPU_MEMORY = 80 * GiB
CPUS_PER_NODE = 4096.0  # ample: a trace's jobs are bound by GPUs, not by host resources
MEMORY_PER_NODE = 64 * 1024 * GiB
CLUSTER_FORMAT = "NODESxGPUS[:MODEL[:MEMORY]], comma-separated: 4x4, 64x8:V100:32GiB,2x8:A100"


def cluster(spec: str) -> tuple[NodeCapacity, ...]:
    """Nodes from ``NODESxGPUS[:MODEL[:MEMORY]]`` groups, e.g. ``"4x4"``, ``"2x8:A100:40,4x4"``.

    MODEL defaults to "GPU", MEMORY (per GPU; a bare number is GiB) to 80 GiB. Each node has
    ample CPUs and host memory. Nodes are named ``node-000``, ``node-001``... across groups.
    """
    groups = [_cluster_group(part) for part in spec.split(",")]
    total = sum(count for count, _, _, _ in groups)
    width = max(3, len(str(total - 1)))
    nodes: list[NodeCapacity] = []
    for count, gpus, model, memory in groups:
        for _ in range(count):
            nodes.append(_node(f"node-{len(nodes):0{width}d}", gpus, model, memory))
    return tuple(nodes)


def _cluster_group(text: str) -> tuple[int, int, str, int]:
    fields = text.strip().split(":")
    size = fields[0].lower().split("x")
    if len(fields) > 3 or len(size) != 2 or not all(part.isdigit() for part in size):
        raise ValueError(f"'{text.strip()}' is not a cluster group; write {CLUSTER_FORMAT}")
    count, gpus = int(size[0]), int(size[1])
    if count < 1:
        raise ValueError(f"'{text.strip()}' has no nodes; write {CLUSTER_FORMAT}")
    model = fields[1] if len(fields) > 1 and fields[1] else DEFAULT_MODEL
    memory = _gpu_memory(fields[2]) if len(fields) > 2 else DEFAULT_GPU_MEMORY
    return count, gpus, model, memory


def _gpu_memory(text: str) -> int:
    text = text.strip()
    try:
        return int(float(text) * GiB) if text.replace(".", "", 1).isdigit() else parse_bytes(text)
    except ValueError:
        raise ValueError(f"'{text}' is not a GPU memory size; write 80 (GiB) or 40GiB") from None


def _node(name: str, gpus: int, model: str, memory: int) -> NodeCapacity:
    devices = tuple(
        GpuCapacity(f"GPU-{name}-{index}", index, model, memory) for index in range(gpus)
    )
    return NodeCapacity(name, devices, CPUS_PER_NODE, MEMORY_PER_NODE)
