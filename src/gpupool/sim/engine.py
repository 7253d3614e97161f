"""Trace replay: a discrete-event simulation on a virtual clock, driving the real scheduler.

Events are job arrivals (the trace, in submit order) and completions (a heap). At each
distinct event time the engine applies every event at that time, then asks the policy for
decisions: it stops the jobs the policy preempts and starts each placement. The policy is
any ``Callable[[Snapshot, Clock], Decisions]``, by default ``gpupool.scheduler.schedule``
itself, with a ``SchedulerState`` of the replay's own: the simulator has no scheduling logic
of its own. When a cycle preempts, the engine
runs another cycle at the same time, so the freed GPUs are used at once (the server's loop
does the same a moment later, when the victims have stopped).

A preempted job stops at once (the grace period is not modelled) and goes back to the queue
with its attained service; it redoes ``restart_cost`` seconds of work when it starts again
(lost progress, start-up), which is how preemption is charged.

Placement modes: ``node`` (the default) keeps each task on one node; a job larger than the
largest node becomes a gang of whole-node tasks when its GPUs divide evenly. ``count`` is
the relaxed mode of Tiresias' simulator: a job of ``g`` GPUs is a gang of ``g`` one-GPU
tasks that may land on any nodes.

The engine keeps each user's decayed usage (GPU-seconds, halved every
``policy.usage_half_life``), which the policy reads for fair share, and for the ``srtf``
reference policy the remaining work of every job.

A job the pool could never hold is refused at submit and reported unscheduled: a task no
node could hold (the scheduler's own ``infeasible_reason``, as the API refuses it), a job
that node placement cannot split (12 GPUs on 8-GPU nodes), or a gang of more tasks than the
empty pool holds at once (32 one-GPU tasks on 16 GPUs). A job still pending when nothing
runs and nothing more arrives can never start: the replay stops and reports it
unscheduled, with the scheduler's reason.

With ``datasets`` (``gpupool.sim.datasets``), each job fetches its dataset onto each of its
nodes that lacks it before its work starts (holding its GPUs meanwhile), each node keeps a
cache of them, and the result counts the bytes fetched: the study of placement that prefers
nodes holding a job's data (``Policy.locality``, ``benchmarks/locality.py``).

With ``order`` "gittins" the snapshot carries the GPU-seconds of the jobs finished so far
(``Snapshot.service``; a censored job's service is a lower bound and is left out), after
``service_history`` (the service of jobs finished before the trace, as a server's history
gives it); the distribution is made anew each time the jobs finished grow by
``SERVICE_REFRESH`` of their number (and at least ``SERVICE_REFRESH_MIN``), since each new
one re-sorts the queues.

``drop_unplaced`` is the fill experiment of the fragmentation study (FGD, ATC'23): a job not
placed in the cycles of its arrival time fails at once instead of waiting. A ``probe`` sees
every start, stop and arrival (``gpupool.sim.fragmentation`` samples fragmentation with it).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import GiB, parse_bytes
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.gittins import ServiceDistribution
from gpupool.scheduler.types import (
    Allocation,
    Clock,
    Decisions,
    GpuCapacity,
    GpuShare,
    NodeCapacity,
    Nomination,
    PendingJob,
    Placement,
    Snapshot,
    TeamQuota,
    Want,
)
from gpupool.sim.datasets import Datasets, NodeCaches
from gpupool.sim.levels import next_crossing, next_starving
from gpupool.sim.refusals import RefusalCache

if TYPE_CHECKING:
    from gpupool.sim.traces import TraceJob

PolicyFunction = Callable[[Snapshot, Clock], Decisions]

STUCK_MESSAGE = "still pending when nothing ran and nothing more was to arrive"
NOT_PLACED_MESSAGE = "did not fit when it arrived (fill experiment: nothing ever ends)"
PLACEMENT_MODES = ("node", "count")
MAX_CYCLES_PER_EVENT = 8  # cycles at one event time (each after preemptions freed GPUs)
SERVICE_REFRESH = 0.05  # "gittins": a new distribution when the jobs finished grow by 5 %
SERVICE_REFRESH_MIN = 16  # ... and by 16 at least


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


class Probe(Protocol):
    """Watches a replay: GPUs taken and given back, and each event time's arrivals."""

    def started(self, allocations: Sequence[Allocation]) -> None: ...

    def stopped(self, allocations: Sequence[Allocation]) -> None: ...

    def arrived(self, jobs: Sequence[TraceJob], pending: Mapping[int, PendingJob]) -> None: ...


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job that ran: when it was submitted, first started and finally ended, and what it
    held (its last attempt's first task: ``node`` and ``shares``)."""

    job_id: int
    team: str
    submit: float
    duration: float
    start: float
    end: float
    gpus: float  # GPUs held: a whole count, or the share of one GPU
    node: str
    shares: tuple[GpuShare, ...]
    preemptions: int = 0

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
    preemptions: int = 0
    restart_cost: float = 0.0
    # with datasets: the bytes fetched onto nodes, the fetches, and the seconds the jobs'
    # attempts waited for their data (holding their GPUs)
    fetched_bytes: int = 0
    fetches: int = 0
    fetch_wait: float = 0.0


def simulate(
    trace_jobs: Iterable[TraceJob],
    nodes: Sequence[NodeCapacity],
    policy: PolicyFunction | None = None,
    *,
    restart_cost: float = 0.0,
    placement: str = "node",
    settings: Policy = DEFAULT_POLICY,
    quotas: Sequence[TeamQuota] = (),
    probe: Probe | None = None,
    drop_unplaced: bool = False,
    datasets: Datasets | None = None,
    service_history: Sequence[float] = (),
) -> SimResult:
    """Replay ``trace_jobs`` on ``nodes`` under ``policy`` (None: the scheduler, with a
    state of this replay's own); deterministic for equal inputs.

    ``settings`` is the ``Policy`` passed in every snapshot (the knobs of the scheduler);
    ``quotas`` the teams' guarantees and limits; ``probe``, ``drop_unplaced``,
    ``datasets`` and ``service_history``: see the module's docstring.
    """
    if restart_cost < 0:
        raise ValueError("restart_cost must be 0 or more seconds")
    if placement not in PLACEMENT_MODES:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENT_MODES)}")
    replay = Replay(nodes, policy, restart_cost, placement, settings, tuple(quotas))
    replay.probe = probe
    replay.drop_unplaced = drop_unplaced
    replay.caches = NodeCaches(datasets) if datasets is not None else None
    replay.finished_service = [float(value) for value in service_history]
    replay.run(trace_jobs)
    return replay.result()


@dataclass(slots=True)
class Progress:
    """A job's progress across attempts."""

    work: float  # seconds of work left (the trace duration, plus restart costs)
    attained: float = 0.0  # GPU-seconds received
    first_start: float | None = None
    started: float = 0.0  # this attempt
    attempt: int = 0
    preemptions: int = 0


class Replay:
    """The state of one replay: clock, event queues, pending and running jobs, records."""

    def __init__(
        self,
        nodes: Sequence[NodeCapacity],
        policy: PolicyFunction | None,
        restart_cost: float,
        placement: str = "node",
        settings: Policy = DEFAULT_POLICY,
        quotas: tuple[TeamQuota, ...] = (),
    ):
        self.nodes = tuple(nodes)
        self.state = SchedulerState()  # what this replay's cycles keep, one to the next
        self.policy = policy if policy is not None else self.schedule
        self.restart_cost = restart_cost
        self.placement = placement
        self.settings = settings
        self.quotas = quotas
        self.clock = VirtualClock()
        self.arrivals: list[TraceJob] = []
        self.next_arrival = 0
        self.completions: list[tuple[float, int, int]] = []  # heap of (end, job id, attempt)
        self.jobs: dict[int, TraceJob] = {}
        self.pending: dict[int, PendingJob] = {}  # insertion (arrival) order
        self.running: dict[int, tuple[Allocation, ...]] = {}
        self.allocations: dict[int, tuple[Allocation, ...]] = {}
        self.progress: dict[int, Progress] = {}
        self.records: dict[int, JobRecord] = {}
        self.unscheduled: dict[int, UnscheduledJob] = {}
        self.cycles = 0
        self.preemptions = 0
        self.last_decisions = Decisions()
        schedulable = [node for node in self.nodes if node.schedulable]
        self._refusals = RefusalCache(schedulable)
        self.largest_node = max((len(node.gpus) for node in schedulable), default=0)
        self.usage = DecayedUsage(settings.usage_half_life)
        self.remaining = Remaining(self)
        self.probe: Probe | None = None
        self.drop_unplaced = False
        self._held: tuple[Allocation, ...] | None = None  # the running allocations, cached
        # the GPUs each preempting job's victims freed for it (the scheduler keeps them for
        # it): carried from one cycle to the next, dropped when the job starts
        self.nominations: dict[int, Nomination] = {}
        # datasets (None: not modelled): the nodes' caches, the nodes where each running job
        # uses its dataset, the nodes as the scheduler sees them (with their holdings)
        self.caches: NodeCaches | None = None
        self.fetching: dict[int, tuple[str, ...]] = {}
        self._seen_nodes: tuple[NodeCapacity, ...] = self.nodes
        self.fetch_wait = 0.0
        # "gittins": the GPU-seconds of the jobs finished (the history's first), and the
        # distribution of them the snapshots carry (made anew as they grow: ``service_now``)
        self.finished_service: list[float] = []
        self._service: ServiceDistribution | None = None

    def run(self, trace_jobs: Iterable[TraceJob]) -> None:
        """Load the arrivals, then step through event times until no event is left."""
        self.arrivals = sorted(trace_jobs, key=lambda job: (job.submit, job.job_id))
        self.jobs = _index_by_id(self.arrivals)
        while (time := self.next_event_time()) is not None:
            self.clock.advance_to(time)
            arrived = self.apply_events(time)
            for _ in range(MAX_CYCLES_PER_EVENT):
                # with nothing pending a cycle has nothing to decide; after preemptions, the
                # freed GPUs are offered again at once
                if not self.pending or not self.run_cycle():
                    break
            if self.probe is not None and arrived:
                self.probe.arrived(arrived, self.pending)
            if self.drop_unplaced:
                self.give_up(NOT_PLACED_MESSAGE)
            elif self.is_stuck():
                self.give_up()

    def next_event_time(self) -> float | None:
        times = []
        if self.next_arrival < len(self.arrivals):
            times.append(self.arrivals[self.next_arrival].submit)
        while self.completions and self._stale(self.completions[0]):
            heapq.heappop(self.completions)
        if self.completions:
            times.append(self.completions[0][0])
        if self.settings.level_wakeups and self.pending:
            now, settings = self.clock.now(), self.settings
            crossing = next_crossing(self.running.values(), settings, now)
            starving = next_starving(self.pending.values(), settings, now)
            times.extend(time for time in (crossing, starving) if time is not None)
        return min(times, default=None)

    def _stale(self, entry: tuple[float, int, int]) -> bool:
        _, job_id, attempt = entry
        progress = self.progress.get(job_id)
        return job_id not in self.running or progress is None or progress.attempt != attempt

    def apply_events(self, time: float) -> list[TraceJob]:
        """Free the jobs ending at ``time``, then queue the jobs arriving at it (returned)."""
        while self.completions and self.completions[0][0] <= time:
            entry = heapq.heappop(self.completions)
            if not self._stale(entry):
                self.finish(entry[1])
        arrivals, arrived = self.arrivals, []
        while self.next_arrival < len(arrivals) and arrivals[self.next_arrival].submit <= time:
            arrived.append(arrivals[self.next_arrival])
            self.arrive(arrivals[self.next_arrival])
            self.next_arrival += 1
        return arrived

    def arrive(self, job: TraceJob) -> None:
        """Queue a job, or refuse it when the pool could never hold it (as the API does)."""
        request, tasks = self.shape(job)
        reason = self._refusals.reason(request, job.gpu_types, tasks)
        if reason is not None:
            if tasks == 1 and self.placement == "node" and request.whole_gpus > self.largest_node:
                reason = f"{self._unsplittable(job)}; {reason}"
            self.unscheduled[job.job_id] = _unscheduled(job, reason)
            return
        self.progress[job.job_id] = Progress(work=job.duration)
        self.pending[job.job_id] = PendingJob(
            job.job_id,
            job.team,
            job.user,
            0,
            job.submit,
            request,
            tasks=tasks,
            gpu_types=job.gpu_types,
            wants=self.wants_of(job),
        )

    def wants_of(self, job: TraceJob) -> tuple[Want, ...]:
        """What the job fetches onto its nodes: its dataset (nothing without datasets)."""
        if self.caches is None:
            return ()
        return (self.caches.datasets.want_of(job.user),)

    def nodes_now(self) -> tuple[NodeCapacity, ...]:
        """The nodes as the scheduler sees them: with what their caches hold."""
        caches = self.caches
        if caches is not None and caches.changed:
            caches.changed = False
            self._seen_nodes = tuple(
                replace(node, holds=caches.holds(node.name)) for node in self.nodes
            )
        return self._seen_nodes

    def _unsplittable(self, job: TraceJob) -> str:
        return (
            f"node placement splits a job into whole nodes only, and "
            f"{job.request.whole_gpus} GPUs are not a multiple of {self.largest_node}"
        )

    def shape(self, job: TraceJob) -> tuple[ResourceRequest, int]:
        """The per-task request and the task count of a job in this placement mode."""
        return task_shape(job.request, self.placement, self.largest_node)

    def schedule(self, snapshot: Snapshot, clock: Clock) -> Decisions:
        """The scheduler's cycle, with this replay's state."""
        return schedule(snapshot, clock, self.state)

    def run_cycle(self) -> bool:
        """Call the policy once on a snapshot of now; True when it preempted anything."""
        if self._held is None:
            self._held = tuple(a for allocations in self.running.values() for a in allocations)
        snapshot = Snapshot(
            self.nodes_now(),
            self._held,
            tuple(self.pending.values()),
            quotas=self.quotas,
            usage=self.usage.view(self.clock.now()),
            policy=self.settings,
            # only the srtf oracle reads it, and the scheduler asks it of every running job
            remaining=self.remaining if self.settings.order == "srtf" else {},
            nominations=self.nominations,
            service=self.service_now() if self.settings.order == "gittins" else None,
        )
        decisions = self.policy(snapshot, self.clock)
        self.cycles += 1
        self.last_decisions = decisions
        self.nominations = dict(decisions.nominations)
        preempted = self.apply_preemptions(decisions)
        by_job: dict[int, list[Placement]] = {}
        for placement in decisions.placements:
            by_job.setdefault(placement.job_id, []).append(placement)
        for job_id, placements in by_job.items():
            self.start(job_id, placements)
        return preempted

    def service_now(self) -> ServiceDistribution | None:
        """The distribution of the jobs finished, made anew when they have grown enough."""
        seen, built = self.finished_service, self._service
        if not seen:
            return None
        if built is None or len(seen) - len(built) >= max(
            SERVICE_REFRESH_MIN, SERVICE_REFRESH * len(built)
        ):
            self._service = built = ServiceDistribution.of(seen)
        return built

    def apply_preemptions(self, decisions: Decisions) -> bool:
        """Stop each victim at once and queue it again with the work it has left."""
        now = self.clock.now()
        for preemption in decisions.preemptions:
            job_id = preemption.job_id
            if job_id not in self.running:
                raise ValueError(f"the policy preempted job {job_id}, which is not running")
            progress = self.progress[job_id]
            allocations = self.running.pop(job_id)
            self._held = None
            if self.probe is not None:
                self.probe.stopped(allocations)
            self.release(job_id)
            ran = max(0.0, now - progress.started)  # not its wait for data
            gpus = _gpus_of(allocations)
            progress.work = max(0.0, progress.work - ran) + self.restart_cost
            progress.attained += gpus * ran
            progress.preemptions += 1
            progress.attempt += 1
            self.usage.change(allocations[0].user, -gpus, now)
            job = self.pending_of(job_id, now)
            self.pending[job_id] = job
            self.preemptions += 1
        return bool(decisions.preemptions)

    def pending_of(self, job_id: int, now: float) -> PendingJob:
        trace = self.jobs[job_id]
        request, tasks = self.shape(trace)
        progress = self.progress[job_id]
        return PendingJob(
            job_id,
            trace.team,
            trace.user,
            0,
            trace.submit,
            request,
            tasks=tasks,
            gpu_types=trace.gpu_types,
            attained=progress.attained,
            queued_at=now,
            wants=self.wants_of(trace),
        )

    def start(self, job_id: int, placements: list[Placement]) -> None:
        job = self.pending.pop(job_id, None)
        if job is None:
            raise ValueError(f"the policy placed job {job_id}, which is not pending")
        self.nominations.pop(job_id, None)
        if len(placements) != job.tasks:
            raise ValueError(f"the policy placed {len(placements)} of job {job_id}'s {job.tasks}")
        now = self.clock.now()
        progress = self.progress[job_id]
        allocations = job.started(placements, now, progress.attained)
        self.running[job_id] = allocations
        self._held = None
        if self.probe is not None:
            self.probe.started(allocations)
        if progress.first_start is None:
            progress.first_start = now
        progress.started = self.fetch(job, placements, now)  # its work starts then
        self.usage.change(job.user, _gpus_of(allocations), now)
        end = progress.started + progress.work
        heapq.heappush(self.completions, (end, job_id, progress.attempt))

    def fetch(self, job: PendingJob, placements: list[Placement], now: float) -> float:
        """Each node of the job fetches what it wants and lacks: when the last has it all."""
        caches = self.caches
        if caches is None or not job.wants:
            return now
        nodes = tuple(dict.fromkeys(placement.node for placement in placements))
        ready = now
        for node in nodes:
            for want in job.wants:
                ready = max(ready, caches.use(node, want, now))
        self.fetching[job.job_id] = nodes
        self.fetch_wait += ready - now
        return ready

    def release(self, job_id: int) -> None:
        """A job stopped: its nodes' caches may let its data go."""
        caches = self.caches
        nodes = self.fetching.pop(job_id, ())
        if caches is None or not nodes:
            return
        for want in self.wants_of(self.jobs[job_id]):
            for node in nodes:
                caches.release(node, want)

    def finish(self, job_id: int) -> None:
        allocations = self.running.pop(job_id)
        self._held = None
        self.release(job_id)
        if self.probe is not None:
            self.probe.stopped(allocations)
        progress = self.progress[job_id]
        job, now = self.jobs[job_id], self.clock.now()
        gpus = _gpus_of(allocations)
        self.usage.change(job.user, -gpus, now)
        progress.attained += gpus * (now - progress.started)
        if not job.censored:  # a censored job's service is only a lower bound
            self.finished_service.append(progress.attained)
        first = allocations[0]
        self.records[job_id] = JobRecord(
            job_id=job_id,
            team=job.team,
            submit=job.submit,
            duration=job.duration,
            start=progress.first_start if progress.first_start is not None else now,
            end=now,
            gpus=gpus,
            node=first.node,
            shares=tuple(part for allocation in allocations for part in allocation.gpus),
            preemptions=progress.preemptions,
        )

    def is_stuck(self) -> bool:
        """Jobs wait, yet nothing runs and nothing more arrives: they can never start."""
        no_arrivals = self.next_arrival >= len(self.arrivals)
        return bool(self.pending) and not self.running and no_arrivals

    def give_up(self, message: str = STUCK_MESSAGE) -> None:
        """Every pending job fails, with the scheduler's reason when it gave one."""
        reasons = self.last_decisions.pending
        for job_id in list(self.pending):
            found = reasons.get(job_id)
            reason = found.message if found is not None else message
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
            fetched_bytes=self.caches.fetched_bytes if self.caches is not None else 0,
            fetches=self.caches.fetches if self.caches is not None else 0,
            fetch_wait=self.fetch_wait,
        )


class DecayedUsage:
    """Each user's GPU-seconds, halved every ``half_life`` seconds, kept exactly between
    events: usage(t + d) = usage(t)·2^(-d/H) + gpus·H/ln 2·(1 - 2^(-d/H))."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.state: dict[str, tuple[float, float, float]] = {}  # user: (usage, at, gpus)

    def at(self, user: str, now: float) -> float:
        usage, then, gpus = self.state.get(user, (0.0, now, 0.0))
        elapsed = now - then
        if elapsed <= 0:
            return usage
        if self.half_life <= 0:
            return usage + gpus * elapsed
        decay = 2.0 ** (-elapsed / self.half_life)
        return usage * decay + gpus * self.half_life / math.log(2) * (1.0 - decay)

    def change(self, user: str, gpus: float, now: float) -> None:
        usage = self.at(user, now)
        held = self.state.get(user, (0.0, now, 0.0))[2]
        self.state[user] = (usage, now, max(0.0, held + gpus))

    def view(self, now: float) -> Mapping[str, float]:
        return UsageView(self, now)


class UsageView(Mapping[str, float]):
    """The decayed usage of every user at one time, worked out when asked."""

    def __init__(self, usage: DecayedUsage, now: float) -> None:
        self._usage = usage
        self._now = now

    def __getitem__(self, user: str) -> float:
        if user not in self._usage.state:
            raise KeyError(user)
        return self._usage.at(user, self._now)

    def get(self, user: str, default: float | None = None) -> float | None:  # type: ignore[override]
        # Mapping.get goes through __getitem__ and a caught KeyError: the scheduler asks this
        # for every user in every cycle
        if user not in self._usage.state:
            return default
        return self._usage.at(user, self._now)

    def __iter__(self) -> Iterator[str]:
        return iter(self._usage.state)

    def __len__(self) -> int:
        return len(self._usage.state)


class Remaining(Mapping[int, float]):
    """The oracle: seconds of work each pending or running job has left (``srtf`` only)."""

    def __init__(self, replay: Replay) -> None:
        self._replay = replay

    def __getitem__(self, job_id: int) -> float:
        replay = self._replay
        progress = replay.progress.get(job_id)
        if progress is None:
            raise KeyError(job_id)
        if job_id in replay.running:
            return max(0.0, progress.work - (replay.clock.now() - progress.started))
        return progress.work

    def __iter__(self) -> Iterator[int]:
        return iter(self._replay.progress)

    def __len__(self) -> int:
        return len(self._replay.progress)


def task_shape(
    request: ResourceRequest, placement: str, largest_node: int
) -> tuple[ResourceRequest, int]:
    """The per-task request and the task count of a job's ``request`` in a placement mode
    (``largest_node``: the GPUs of the largest schedulable node)."""
    whole = request.whole_gpus
    if whole > 1 and placement == "count":
        return _with_gpus(request, 1), whole
    if whole > largest_node > 0 and whole % largest_node == 0:
        return _with_gpus(request, largest_node), whole // largest_node
    return request, 1


def _with_gpus(request: ResourceRequest, gpus: int) -> ResourceRequest:
    return request.model_copy(update={"gpus": float(gpus)})


def _gpus_of(allocations: Sequence[Allocation]) -> float:
    return sum(part.share for allocation in allocations for part in allocation.gpus)


def _index_by_id(jobs: Sequence[TraceJob]) -> dict[int, TraceJob]:
    by_id: dict[int, TraceJob] = {}
    for job in jobs:
        if job.job_id in by_id:
            raise ValueError(f"job id {job.job_id} appears twice in the trace")
        if job.duration < 0:
            raise ValueError(f"job {job.job_id} has a negative duration")
        by_id[job.job_id] = job
    return by_id


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
