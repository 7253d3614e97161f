"""Simulate forward from a given state: when would each pending job start?

The ETA predictor's entry point into the simulator. Where ``engine.simulate`` replays a trace
from an empty pool, ``forward`` starts from a pool as it is now: jobs already running (each with
the seconds of work it is assumed to have left) and jobs already waiting (each with the seconds
it is assumed to run once started). It drives the real scheduler on the engine's virtual clock,
with the engine's decayed usage, until every waiting job has started or a bound is hit:

* ``horizon``: seconds of virtual time looked ahead; a job not started by then has no estimate;
* ``max_cycles``: calls to the scheduler; the work done is bounded whatever the queue holds.

A preempted job goes back to the queue with the work it had left (no restart cost); its first
start is what is reported. Nothing arrives during the simulation: jobs submitted later are not
foreseen, which is why an estimate is only an estimate.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.types import Allocation, Clock, Decisions, PendingJob, Placement, Snapshot
from gpupool.sim.engine import MAX_CYCLES_PER_EVENT, DecayedUsage, PolicyFunction, VirtualClock

DEFAULT_HORIZON = 7 * 86400.0
DEFAULT_MAX_CYCLES = 400


@dataclass(frozen=True, slots=True)
class Running:
    """A job holding GPUs now: its allocations (one per task), the seconds it has left, and
    its per-task request (to queue it again if it is preempted; None: what it holds)."""

    allocations: tuple[Allocation, ...]
    remaining: float
    request: ResourceRequest | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job waiting now, and the seconds it is assumed to run once it starts."""

    job: PendingJob
    duration: float


@dataclass(frozen=True)
class ForwardState:
    """The pool at ``now``, as the simulation starts from it."""

    now: float
    nodes: Sequence
    running: Sequence[Running]
    waiting: Sequence[Waiting]
    quotas: Sequence = ()
    usage: Mapping[str, float] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    policy: Policy = DEFAULT_POLICY


@dataclass(frozen=True)
class ForwardResult:
    """First start time of each waiting job that started; why the rest did not.

    ``stopped``: ``"done"`` (every job started), ``"horizon"``, ``"cycles"`` (a bound was
    hit) or ``"stuck"`` (jobs wait, nothing runs: they cannot start as the pool is).
    """

    starts: dict[int, float]
    stopped: str
    cycles: int
    until: float


def forward(
    state: ForwardState,
    policy: PolicyFunction | None = None,
    *,
    horizon: float = DEFAULT_HORIZON,
    max_cycles: int = DEFAULT_MAX_CYCLES,
) -> ForwardResult:
    """Run ``policy`` (None: the scheduler) forward from ``state``; deterministic for equal
    inputs. The scheduler's cycles keep a ``SchedulerState`` of this run's own: the control
    loop's is left to it."""
    return Forward(state, policy, horizon, max_cycles).run()


class Forward:
    """The state of one forward run: clock, running jobs and their ends, the queue."""

    def __init__(
        self, state: ForwardState, policy: PolicyFunction | None, horizon: float, max_cycles: int
    ) -> None:
        self.state = state
        self.kept = SchedulerState()  # what this run's cycles keep, one to the next
        self.policy = policy if policy is not None else self.schedule
        self.settings = replace(state.policy, explain=False)  # nobody reads reasons here
        self.clock = VirtualClock(state.now)
        self.deadline = state.now + max(0.0, horizon)
        self.max_cycles = max_cycles
        self.cycles = 0
        self.pending: dict[int, PendingJob] = {w.job.job_id: w.job for w in state.waiting}
        self.work: dict[int, float] = {w.job.job_id: max(0.0, w.duration) for w in state.waiting}
        self.running: dict[int, tuple[Allocation, ...]] = {}
        self.started_at: dict[int, float] = {}
        self.ends: list[tuple[float, int, int]] = []  # heap of (end, job id, attempt)
        self.attempt: dict[int, int] = {}
        self.starts: dict[int, float] = {}
        self.left_at_start: dict[int, float] = {}
        self.waiting = dict(self.pending)  # as they were: their first start is reported
        self.requests = {
            r.allocations[0].job_id: r.request for r in state.running if r.allocations and r.request
        }
        self.usage = DecayedUsage(state.policy.usage_half_life)  # what the simulation adds
        for job in state.running:
            self._hold(job.allocations, job.remaining)

    def schedule(self, snapshot: Snapshot, clock: Clock) -> Decisions:
        """The scheduler's cycle, with this run's state."""
        return schedule(snapshot, clock, self.kept)

    def run(self) -> ForwardResult:
        while True:
            stopped = self._cycles()
            if stopped:
                return self._result(stopped)
            end = self._next_end()
            if end is None:
                return self._result("stuck")
            if end > self.deadline:
                return self._result("horizon")
            self.clock.advance_to(end)
            self._finish_due(end)

    def _cycles(self) -> str | None:
        """Cycles at this time (again after preemptions); a reason to stop, or None."""
        for _ in range(MAX_CYCLES_PER_EVENT):
            if not self.pending:
                return "done"
            if self.cycles >= self.max_cycles:
                return "cycles"
            if not self._cycle():
                break
        return None if self.pending else "done"

    def _cycle(self) -> bool:
        """One call of the policy; True when it preempted something."""
        now = self.clock.now()
        snapshot = Snapshot(
            tuple(self.state.nodes),
            tuple(a for held in self.running.values() for a in held),
            tuple(self.pending.values()),
            quotas=tuple(self.state.quotas),
            usage=StartedUsage(self.state, self.usage, now),
            weights=self.state.weights,
            policy=self.settings,
        )
        decisions = self.policy(snapshot, self.clock)
        self.cycles += 1
        for preemption in decisions.preemptions:
            self._requeue(preemption.job_id, now)
        by_job: dict[int, list[Placement]] = {}
        for placement in decisions.placements:
            by_job.setdefault(placement.job_id, []).append(placement)
        for job_id, placements in by_job.items():
            self._start(job_id, placements, now)
        return bool(decisions.preemptions)

    def _start(self, job_id: int, placements: list[Placement], now: float) -> None:
        job = self.pending.pop(job_id, None)
        if job is None:
            return
        if job_id in self.waiting:
            self.starts.setdefault(job_id, now)
        held = job.started(placements, now)
        self._hold(held, self.work.pop(job_id, 0.0))

    def _hold(self, allocations: tuple[Allocation, ...], remaining: float) -> None:
        if not allocations:
            return
        first, now = allocations[0], self.clock.now()
        job_id = first.job_id
        self.running[job_id] = allocations
        self.started_at[job_id] = now
        attempt = self.attempt[job_id] = self.attempt.get(job_id, 0) + 1
        self.usage.change(first.user, _gpus(allocations), now)
        heapq.heappush(self.ends, (now + max(0.0, remaining), job_id, attempt))
        self.left_at_start[job_id] = max(0.0, remaining)

    def _requeue(self, job_id: int, now: float) -> None:
        held = self.running.pop(job_id, None)
        if held is None:
            return
        first = held[0]
        self.usage.change(first.user, -_gpus(held), now)
        ran = now - self.started_at.pop(job_id, now)
        left = max(0.0, self.left_at_start.pop(job_id, 0.0) - ran)
        self.work[job_id] = left
        attained = first.attained + _gpus(held) * max(0.0, now - first.started_at)
        self.pending[job_id] = self._queued_again(job_id, held, attained, now)

    def _queued_again(
        self, job_id: int, held: tuple[Allocation, ...], attained: float, now: float
    ) -> PendingJob:
        """A preempted job as it waits again: as it waited at the start, or (a job that was
        running at the start) asking for its request or what it held."""
        if job_id in self.waiting:
            return replace(self.waiting[job_id], attained=attained, queued_at=now)
        first = held[0]
        return PendingJob(
            job_id,
            first.team,
            first.user,
            first.priority,
            first.started_at,
            self.requests.get(job_id) or held_request(first),
            tasks=len(held),
            preemptible=first.preemptible,
            max_runtime=first.max_runtime,
            attained=attained,
            queued_at=now,
        )

    def _next_end(self) -> float | None:
        while self.ends and self._stale(self.ends[0]):
            heapq.heappop(self.ends)
        return self.ends[0][0] if self.ends else None

    def _stale(self, entry: tuple[float, int, int]) -> bool:
        _, job_id, attempt = entry
        return job_id not in self.running or self.attempt.get(job_id) != attempt

    def _finish_due(self, now: float) -> None:
        while self.ends and self.ends[0][0] <= now:
            entry = heapq.heappop(self.ends)
            if self._stale(entry):
                continue
            held = self.running.pop(entry[1])
            self.started_at.pop(entry[1], None)
            self.left_at_start.pop(entry[1], None)
            self.usage.change(held[0].user, -_gpus(held), now)

    def _result(self, stopped: str) -> ForwardResult:
        return ForwardResult(dict(self.starts), stopped, self.cycles, self.clock.now())


class StartedUsage(Mapping[str, float]):
    """Each user's decayed usage at ``now``: what it was at the start, decayed since, plus
    what the simulation has added (the engine's ``DecayedUsage``)."""

    def __init__(self, state: ForwardState, added: DecayedUsage, now: float) -> None:
        self._start = state.usage
        half_life = state.policy.usage_half_life
        elapsed = now - state.now
        self._decay = 2.0 ** (-elapsed / half_life) if half_life > 0 and elapsed > 0 else 1.0
        self._added_view = added.view(now)

    def __getitem__(self, user: str) -> float:
        base = self._start.get(user)
        added = self._added_view.get(user)
        if base is None and added is None:
            raise KeyError(user)
        return (base or 0.0) * self._decay + (added or 0.0)

    def __iter__(self) -> Iterator[str]:
        return iter(set(self._start) | set(self._added_view))

    def __len__(self) -> int:
        return len(set(self._start) | set(self._added_view))


def _gpus(allocations: Sequence[Allocation]) -> float:
    return sum(part.share for allocation in allocations for part in allocation.gpus)


def held_request(allocation: Allocation) -> ResourceRequest:
    """A request for what one task holds: its GPUs (or share of one), CPUs and memory."""
    share = sum(part.share for part in allocation.gpus)
    memory = max((part.memory_bytes for part in allocation.gpus), default=0)
    return ResourceRequest(
        gpus=share or None,
        gpu_memory_bytes=memory if 0 < share < 1 and memory else None,
        cpus=allocation.cpus if allocation.cpus > 0 else 1.0,
        memory_bytes=allocation.memory_bytes or None,
    )
