"""Fragmentation-aware packing: FGD's fragmentation gradient (Weng et al., ATC'23).

Best fit puts a task where the least capacity is left over; FGD puts it where the node's
*fragmentation* grows least. Fragmentation is the free GPU capacity that the typical task
cannot use. For one node and one task shape ``m`` (a share of one GPU or a count of whole
GPUs, its allowed GPU models and its CPUs), the fragment is all of the node's free GPU
capacity when the task cannot run there at all (too few free CPUs, too few fully free GPUs of
an allowed model, or no GPU with enough free share); else the free share of every GPU it
could not use. Shapes are weighted by how often they occur in the workload (``p_m``); a spot's
score is the growth of its node's fragmentation, ``sum_m p_m * (fragment(after, m) -
fragment(before, m))``. The lowest wins; best fit breaks ties. Host memory does not count.

The workload is read from the snapshot: the tasks running and the tasks waiting, by shape.
The candidates are the first ``CANDIDATES`` spots of each kind in best fit's order
(``placement.spots``; ``placement.packed_spot`` chooses among them), so that the work per
task stays bounded on a large pool.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from gpupool.scheduler.capacity import Claim, NodeState
from gpupool.scheduler.fit import CPU_EPSILON, Demand, model_matches
from gpupool.scheduler.kept import recounted
from gpupool.scheduler.state import SchedulerState, remembered
from gpupool.scheduler.types import SHARE_EPSILON, Allocation, PendingJob

CANDIDATES = 16  # spots scored per kind (shared GPUs, free GPUs, nodes) per task
SCORE_EPSILON = 1e-9
SHAPES = 24  # the most frequent task shapes kept (the rest weigh little)

# a node's GPUs as fragmentation sees them: their (free share, model), sorted
GpuState = tuple[tuple[float, str], ...]
FRAGMENTS_MAX = 1 << 18  # fragments kept on the state before they are forgotten


@dataclass(frozen=True, slots=True)
class TaskShape:
    """One GPU demand of the workload: a share (< 1) or a whole count, the models allowed,
    its CPUs (0: not counted), and its weight (its frequency among the workload's GPU tasks)."""

    gpus: float
    types: tuple[str, ...]
    weight: float
    cpus: float = 0.0


def shapes_of(counts: Counter[tuple[float, tuple[str, ...], float]]) -> tuple[TaskShape, ...]:
    """Shapes with their frequencies from counts by (GPUs, types, CPUs)."""
    total = sum(counts.values())
    return tuple(
        TaskShape(gpus, types, count / total, cpus)
        for (gpus, types, cpus), count in sorted(counts.items())
    )


def workload_of(
    allocations: Iterable[Allocation], pending: Iterable[PendingJob], state: SchedulerState
) -> tuple[TaskShape, ...]:
    """The GPU task shapes of the running and waiting tasks, with their frequencies (counted
    from the state's last count, less the tasks gone and plus those come)."""

    def weigh(item: Allocation | PendingJob) -> tuple[tuple | None, int]:
        _, key, count = _task(item, state)
        return key, count

    kept, counts = recounted(state.workload, (*allocations, *pending), _item_key, weigh)
    if kept is not None:
        state.workload = kept
    return shapes_of(counts)


def _item_key(item: Allocation | PendingJob) -> tuple:
    """What names a running task (its job and task) or a waiting job (its id) of a cycle."""
    return (item.job_id, item.task) if isinstance(item, Allocation) else (item.job_id,)


# running and waiting tasks (frozen) last many cycles: each one's shape is worked out once,
# kept on the state by ``_item_key`` (an entry counts for its object only)
def _task(item: Allocation | PendingJob, state: SchedulerState) -> tuple[object, tuple | None, int]:
    name = _item_key(item)
    found = state.task_shapes.get(name)
    if found is not None and found[0] is item:
        return found
    return remembered(state.task_shapes, name, _task_of(item))


def _task_of(item: Allocation | PendingJob) -> tuple[object, tuple | None, int]:
    key: tuple | None = None
    count = 1
    if isinstance(item, Allocation):
        parts = item.gpus
        if parts:
            gpus = parts[0].share if len(parts) == 1 else float(len(parts))
            key = (round(gpus, 6), item.gpu_types, round(item.cpus, 3))
    else:
        gpus = item.request.gpus
        count = item.tasks
        if gpus:
            key = (round(gpus, 6), item.gpu_types, round(item.request.cpus, 3))
    return (item, key, count)


def node_fragment(free: Sequence[float], models: Sequence[str], shape: TaskShape) -> float:
    """FGD's fragment of one node's GPUs for one task shape, in GPUs (``free``: each GPU's
    free share, ``models``: each GPU's model; CPUs apart: ``Packer``)."""
    usable = [
        share
        for share, model in zip(free, models, strict=True)
        if not shape.types or model_matches(shape.types, model)
    ]
    total = math.fsum(free)
    if shape.gpus < 1:
        if not any(share >= shape.gpus - SHARE_EPSILON for share in usable):
            return total
        return math.fsum(
            share
            for share, model in zip(free, models, strict=True)
            if share < shape.gpus - SHARE_EPSILON
            or (shape.types and not model_matches(shape.types, model))
        )
    whole = sum(1 for share in usable if share >= 1 - SHARE_EPSILON)
    if whole < shape.gpus:
        return total
    return total - whole  # the partly used GPUs, and the whole ones of other models


def gpu_fragment(
    state: GpuState, gpus: float, types: tuple[str, ...], memo: SchedulerState
) -> float:
    """``node_fragment`` of a GPU state (kept on ``memo``: states recur across nodes and
    cycles)."""
    key = (state, gpus, types)
    fragments = memo.fragments
    found = fragments.get(key)
    if found is None:
        if len(fragments) >= FRAGMENTS_MAX:
            fragments.clear()
        free = [share for share, _ in state]
        models = [model for _, model in state]
        found = fragments[key] = node_fragment(free, models, TaskShape(gpus, types, 1.0))
    return found


def gpu_state(node: NodeState) -> GpuState:
    """The node's GPU state."""
    return tuple(sorted((round(gpu.free_share, 6), gpu.model) for gpu in node.gpus))


def claimed(state: GpuState, claim: Claim) -> GpuState:
    """The GPU state of the claim's node (``state``) once the claim is taken."""
    after = list(state)
    for gpu, share, _ in claim.parts:
        free = round(gpu.free_share, 6)
        at = after.index((free, gpu.model))
        after[at] = (round(max(0.0, free - share), 6), gpu.model)
    after.sort()
    return tuple(after)


@dataclass(slots=True)
class _Group:
    """The shapes of one (GPUs, types): their weight, and the weight of those asking more
    than a given number of CPUs (``more``, by bisection of the sorted ``cpus``)."""

    gpus: float
    types: tuple[str, ...]
    weight: float = 0.0
    cpus: list[float] = field(default_factory=list)
    above: list[float] = field(default_factory=list)  # weight of cpus[i:]

    def more(self, cpus: float) -> float:
        at = bisect_right(self.cpus, cpus + CPU_EPSILON)
        return self.above[at] if at < len(self.above) else 0.0


def _groups(shapes: Sequence[TaskShape]) -> list[_Group]:
    kept = sorted(shapes, key=lambda shape: -shape.weight)[:SHAPES]
    total = math.fsum(shape.weight for shape in kept) or 1.0
    by_kind: dict[tuple[float, tuple[str, ...]], list[TaskShape]] = defaultdict(list)
    for shape in kept:
        by_kind[(shape.gpus, shape.types)].append(shape)
    groups = []
    for (gpus, types), members in sorted(by_kind.items()):
        members.sort(key=lambda shape: shape.cpus)
        weights = [shape.weight / total for shape in members]
        above = list(accumulate(reversed(weights)))[::-1]
        groups.append(_Group(gpus, types, math.fsum(weights), [s.cpus for s in members], above))
    return groups


class Packer:
    """FGD placement for one cycle: the workload's shapes and the scores of node states."""

    def __init__(
        self,
        shapes: Sequence[TaskShape] = (),
        allocations: Iterable[Allocation] = (),
        pending: Iterable[PendingJob] = (),
        memo: SchedulerState | None = None,
    ) -> None:
        """``shapes``, or the workload of ``allocations`` and ``pending`` (read when first
        needed: a cycle that places nothing never reads it); ``memo``: the state the
        workload and fragments are kept on (None: this packer's own)."""
        self.memo = memo if memo is not None else SchedulerState()
        self._groups: list[_Group] | None = _groups(shapes) if shapes else None
        self._source = (allocations, pending)
        self._scores: dict[tuple[GpuState, float], float] = {}
        self._after: dict[tuple[GpuState, tuple], GpuState] = {}
        self._whole: dict[tuple[GpuState, float, int, float], float] = {}

    @property
    def groups(self) -> list[_Group]:
        if self._groups is None:
            self._groups = _groups(workload_of(*self._source, self.memo))
        return self._groups

    def fragmentation(self, state: GpuState, cpus: float) -> float:
        """A node's fragmentation, in GPUs: its GPU state and free CPUs."""
        key = (state, round(cpus, 3))
        found = self._scores.get(key)
        if found is None:
            total = math.fsum(share for share, _ in state)
            found = 0.0
            for group in self.groups:
                fragment = gpu_fragment(state, group.gpus, group.types, self.memo)
                starved = group.more(cpus) if fragment < total else 0.0
                found += (group.weight - starved) * fragment + starved * total
            self._scores[key] = found
        return found

    def choose(self, claims: Iterable[Claim], demand: Demand) -> Claim | None:
        """Of ``claims`` (in best fit's order), the one whose node's fragmentation grows
        least; the first of equals."""
        best: tuple[float, Claim] | None = None
        for claim in claims:
            state, after = self.before_after(claim)
            score = self.growth(state, after, claim.node.cpus, demand.cpus)
            if best is None or score < best[0] - SCORE_EPSILON:
                best = (score, claim)
        return best[1] if best is not None else None

    def growth(self, state: GpuState, after: GpuState, cpus: float, taken: float) -> float:
        """How much a node's fragmentation grows from ``state`` with ``cpus`` free to
        ``after`` with ``taken`` CPUs fewer."""
        return self.fragmentation(after, cpus - taken) - self.fragmentation(state, cpus)

    def before_after(self, claim: Claim) -> tuple[GpuState, GpuState]:
        """The GPU state of the claim's node, and the state once the claim is taken."""
        state = self.state(claim.node)
        parts = tuple((gpu.free_share, gpu.model, share) for gpu, share, _ in claim.parts)
        key = (state, parts)
        after = self._after.get(key)
        if after is None:
            after = self._after[key] = claimed(state, claim)
        return state, after

    def whole_growth(self, node: NodeState, demand: Demand) -> float:
        """``growth`` for whole GPUs on a node of one model (any of its free GPUs will do)."""
        state = self.state(node)
        key = (state, node.cpus, demand.whole, demand.cpus)
        found = self._whole.get(key)
        if found is None:
            left = list(state)
            count = demand.whole
            for at, (share, model) in enumerate(state):
                if count and share >= 1 - SHARE_EPSILON:
                    left[at] = (0.0, model)
                    count -= 1
            after = tuple(sorted(left))
            found = self._whole[key] = self.growth(state, after, node.cpus, demand.cpus)
        return found

    def state(self, node: NodeState) -> GpuState:
        """The node's GPU state (kept with the node while it does not change)."""
        found = node.packed
        if found is None or found[0] != node.version:
            found = node.packed = (node.version, gpu_state(node))
        return found[1]
