"""What the scheduler keeps from one cycle to the next, owned by whoever runs the cycles.

A ``SchedulerState`` is made by its owner and handed to every ``schedule`` call it makes: the
server's control loop keeps one, each simulator replay its own, each ETA forecast its own.
It is a cache: a cycle decides from its snapshot alone, and a new state (or none: a state
for that call only) gives the same decisions, only slower. One owner, one cycle at a time:
nothing here is shared between threads, so nothing is locked.

Per-object entries are keyed by what names the object (a job id, a task, a node name) and
hold the object they were worked out from: an entry counts only for that very object
(``entry[0] is obj``), and each map is emptied when it reaches ``CACHED_MAX`` entries.

The figures are ``benchmarks/scheduler_scale.py --apart`` (1,000 nodes x 8 GPUs, 10,000
pending; the server's next cycle, p50) with the field dropped before each cycle, against the
state kept whole; see docs/scheduling.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain.policy import Policy
from gpupool.scheduler.kept import ALLOCATION_KEY, Counted, by_key, changes
from gpupool.scheduler.parking import Parking
from gpupool.scheduler.types import (
    Allocation,
    Clock,
    Decisions,
    GpuCapacity,
    HandOver,
    NodeCapacity,
    PendingJob,
    Snapshot,
)

CACHED_MAX = 65536  # entries of one per-object map before it is emptied


@dataclass(eq=False)
class SchedulerState:
    """Every index and memo a cycle hands to the next (each field: what it keeps, why)."""

    # (typed ``Any``: the modules that make these three import this one)
    # the nodes and their free capacity (``capacity.FreeCapacity``), brought up to date (only
    # nodes whose allocations changed) instead of built anew, and rolled back after each cycle
    capacity: tuple[Sequence[NodeCapacity], Any] | None = None
    # the users' queues in order (``ordering.KeptOrder``): a job's place changes only when it
    # starves, so a cycle bisects in the jobs come instead of sorting every pending job anew
    order: Any = None
    # the running jobs as possible victims, by job and by node (``preemption.KeptRunning``;
    # only the jobs whose allocations changed are worked out again)
    running: Any = None
    # node name -> (node, its GPUs in index order, their models): nodes seldom change
    node_gpus: dict[str, tuple[NodeCapacity, tuple[GpuCapacity, ...], frozenset[str]]] = field(
        default_factory=dict
    )
    # node name -> (node, its allocations, what they leave free): a node's holders seldom change
    node_held: dict[str, tuple[NodeCapacity, tuple[Allocation, ...], tuple]] = field(
        default_factory=dict
    )
    # the last tuple of allocations and its grouping by node (a cycle asks more than once)
    held_by_node: tuple[tuple, dict[str, tuple[Allocation, ...]]] = ((), {})
    # (job id, task) -> (allocation, the GPUs it holds): summed once per allocation
    allocation_gpus: dict[tuple[int, int], tuple[Allocation, float]] = field(default_factory=dict)
    # the allocations the teams' held GPUs were last counted from, and those counts
    team_held: Counted | None = None
    # job id -> (job, its shape for the memo's groups); equal shapes are one object (shapes)
    job_shapes: dict[int, tuple[PendingJob, tuple]] = field(default_factory=dict)
    shapes: dict[tuple, tuple] = field(default_factory=dict)
    # job id -> (job, policy, its least-attained-service key, the service distribution it
    # was placed by): worked out once per policy (and distribution, for "gittins")
    job_keys: dict[int, tuple[PendingJob, Policy, tuple[tuple, float, float], Any]] = field(
        default_factory=dict
    )
    # (GPU state, GPUs, types) -> FGD fragment: states recur across nodes and cycles
    fragments: dict[tuple, float] = field(default_factory=dict)
    # item key -> (allocation or job, its task shape, its tasks), for the packer's workload
    task_shapes: dict[tuple, tuple[object, tuple | None, int]] = field(default_factory=dict)
    # the running and waiting tasks the workload was last counted from, and those counts
    workload: Counted | None = None
    # the empty pool's capacity (explanations only read it), while the nodes are the same
    empty: tuple[tuple[NodeCapacity, ...], Any] | None = None
    # the jobs that found neither room nor victims, not tried again until something they
    # wait on changes (``parking``: kube-scheduler's unschedulable queue)
    parking: Parking = field(default_factory=Parking)
    # the last allocations by (job id, task), and the last changes between two such maps:
    # the free capacity and the running jobs each ask for both in every cycle
    allocations_keyed: tuple[Sequence[Allocation], dict] | None = None
    allocation_changes: tuple[dict, dict, tuple[list, list]] | None = None


# what the server's control loop calls each cycle, with the state it keeps for it:
# ``gpupool.scheduler.schedule``
Schedule = Callable[[Snapshot, Clock, SchedulerState, HandOver | None], Decisions]


def allocations_by_key(state: SchedulerState, allocations: Sequence[Allocation]) -> dict:
    """``kept.by_key`` of the allocations, worked out once for the same tuple (a list may
    change under the same object: worked out each time)."""
    last = state.allocations_keyed
    if last is not None and last[0] is allocations:
        return last[1]
    present = by_key(allocations, ALLOCATION_KEY)
    if isinstance(allocations, tuple):
        state.allocations_keyed = (allocations, present)
    return present


def allocations_changed(state: SchedulerState, known: dict, present: dict) -> tuple[list, list]:
    """``kept.changes`` between two maps of ``allocations_by_key``, worked out once for the
    same two (the lists are shared: not to be changed)."""
    last = state.allocation_changes
    if last is not None and last[0] is known and last[1] is present:
        return last[2]
    found = changes(known, present)
    state.allocation_changes = (known, present, found)
    return found


def remembered(cache: dict, key: object, entry: tuple) -> tuple:
    """Keep ``entry`` under ``key`` (emptying a full map first) and return it."""
    if len(cache) >= CACHED_MAX:
        cache.clear()
    cache[key] = entry
    return entry
