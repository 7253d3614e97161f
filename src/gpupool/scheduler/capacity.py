"""Phase 1: free capacity, the nodes minus what allocations hold, indexed for placement.

Two indexes keep placement away from scans of every node and every GPU:

* ``buckets[k]``: the nodes (by rank, i.e. position in name order) with ``k`` free whole GPUs;
* ``shared``: the GPUs partly in use, sorted by (free share, free memory, node rank, position),
  so the best-fitting shared GPU for a fraction is found by bisection.

Capacity only ever shrinks within a cycle: ``take`` subtracts a placement at once.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from gpupool.scheduler.state import (
    SchedulerState,
    allocations_by_key,
    allocations_changed,
    remembered,
)
from gpupool.scheduler.types import SHARE_EPSILON, Allocation, GpuCapacity, NodeCapacity

GpuKey = tuple[float, int, int, int]
CPU_EPSILON = 1e-9  # CPUs compared as floats


@dataclass(slots=True)
class GpuState:
    """One GPU and what is used of it; ``whole`` when one task holds all of it."""

    uuid: str
    index: int
    memory_bytes: int
    model: str
    domain: int
    rank: int  # the rank of its node
    position: int  # its place in the node's GPUs, in index order
    used_share: float = 0.0
    used_memory: int = 0
    whole: bool = False
    free: bool = True  # nothing of it is held

    @property
    def is_shared(self) -> bool:
        return not self.whole and not self.free

    @property
    def free_share(self) -> float:
        return 0.0 if self.whole else max(0.0, 1.0 - self.used_share)

    @property
    def free_memory(self) -> int:
        return 0 if self.whole else max(0, self.memory_bytes - self.used_memory)

    def key(self) -> GpuKey:
        return (self.free_share, self.free_memory, self.rank, self.position)

    def hold(self, share: float, memory: int) -> None:
        self.used_share += share
        self.used_memory += memory
        if share >= 1.0 - SHARE_EPSILON:
            self.whole = True
        self.free = not self.whole and self.used_share == 0 and self.used_memory == 0

    def unhold(self, share: float, memory: int) -> None:
        """Give back what ``hold`` took (a gang that could not start in full)."""
        self.used_share = max(0.0, self.used_share - share)
        self.used_memory = max(0, self.used_memory - memory)
        if share >= 1.0 - SHARE_EPSILON:
            self.whole = False
        if self.used_share <= SHARE_EPSILON:
            self.used_share = 0.0
        self.free = not self.whole and self.used_share == 0 and self.used_memory == 0


@dataclass(slots=True)
class NodeState:
    """One node's free CPUs and memory, its GPUs, and how many of them are wholly free."""

    name: str
    rank: int
    gpus: list[GpuState]
    by_uuid: dict[str, GpuState]
    cpus: float
    memory_bytes: int
    models: frozenset[str] = frozenset()
    free_count: int = 0
    version: int = 0  # counts the changes of its GPUs in the cycle (``take``, ``give_back``)
    # (version, the packer's GPU state of the node at that version): kept with the node from
    # one cycle to the next, forgotten when ``rollback`` puts an older version back
    packed: tuple[int, tuple] | None = None

    def count_free(self) -> int:
        return sum(1 for gpu in self.gpus if gpu.free)


@dataclass(slots=True)
class Claim:
    """A spot chosen for a request: a node and, per GPU, the share and memory to hold."""

    node: NodeState
    parts: tuple[tuple[GpuState, float, int], ...]


class FreeCapacity:
    """The free capacity of the given nodes (all of them: filter unschedulable ones first)."""

    def __init__(
        self,
        nodes: Sequence[NodeCapacity],
        allocations: Iterable[Allocation] = (),
        state: SchedulerState | None = None,
    ):
        self.state = state = state if state is not None else SchedulerState()
        self.sources = ordered = sorted(nodes, key=lambda node: node.name)
        # in one order whatever the snapshot's: float sums of shares then come out the same
        held = held_by_node(allocations, state)
        last = {node.name: rank for rank, node in enumerate(ordered)}  # a name's last node
        self.holds = [last[node.name] == rank for rank, node in enumerate(ordered)]
        self.ranks: dict[str, list[int]] = {}  # a name's nodes (one, in a well-formed pool)
        for rank, node in enumerate(ordered):
            self.ranks.setdefault(node.name, []).append(rank)
        # those of the last ``update``, by (job id, task)
        self._present: dict[tuple, Allocation] | None = None
        self.held = [
            held.get(node.name, ()) if self.holds[rank] else () for rank, node in enumerate(ordered)
        ]
        self.nodes = [
            _node_state(node, rank, self.held[rank], state) for rank, node in enumerate(ordered)
        ]
        self.by_name = {node.name: node for node in self.nodes}
        self.max_gpus = max((len(node.gpus) for node in self.nodes), default=0)
        self.max_gpu_memory = max(
            (gpu.memory_bytes for node in self.nodes for gpu in node.gpus), default=0
        )
        # the pool's GPUs and their sizes of memory (the nodes' GPUs do not change)
        self.pool_gpus = float(sum(len(node.gpus) for node in self.nodes))
        self.gpu_memories = {gpu.memory_bytes for node in self.nodes for gpu in node.gpus}
        self.buckets: list[list[int]] = [[] for _ in range(self.max_gpus + 1)]
        for node in self.nodes:
            node.free_count = node.count_free()
            self.buckets[node.free_count].append(node.rank)
        self.shared: list[GpuKey] = sorted(
            gpu.key() for node in self.nodes for gpu in node.gpus if gpu.is_shared
        )
        self._saved: dict[int, tuple] | None = None  # by rank: nodes as before ``take``s
        # what was free, by rank, of the nodes the last cycle changed, as it left them (None:
        # no cycle yet), and the nodes the last ``update`` left with more free than before:
        # what ``grown`` compares (``parking``: a job waits until a node has more free)
        self.ends: dict[int, tuple] | None = None
        self.renewed_more: set[int] = set()
        self.last_cycle: int | None = None  # the number of the cycle ``ends`` is of

    # -- kept from one cycle to the next (``leased_capacity``) -----------------------------

    def journal(self) -> None:
        """From now on, remember each node as it was before it first changes."""
        self._saved = {}

    def _touch(self, node: NodeState) -> None:
        saved = self._saved
        if saved is not None and node.rank not in saved:
            saved[node.rank] = _used_of(node)

    def rollback(self) -> None:
        """Put every node changed since ``journal`` back as it was (what they had free at
        the end is kept for ``grown``)."""
        saved, self._saved = self._saved or {}, None
        self.ends = {rank: _free_of(self.nodes[rank]) for rank in saved}
        for rank, used in saved.items():
            # ``packed`` was worked out at a version this node may reach again, changed
            self._put_back(self.nodes[rank], used, None)

    def _put_back(self, node: NodeState, used: tuple, packed: tuple[int, tuple] | None) -> None:
        """The node as ``_used_of`` saw it, its indexes in step."""
        self._unindex_node(node)
        cpus, memory_bytes, version, gpus = used
        node.cpus, node.memory_bytes, node.version, node.packed = (
            cpus,
            memory_bytes,
            version,
            packed,
        )
        for gpu, (share, memory, whole, free) in zip(node.gpus, gpus, strict=True):
            gpu.used_share, gpu.used_memory, gpu.whole, gpu.free = share, memory, whole, free
        self._index_node(node)

    def removal(self) -> Removal:
        """A simulated removal of allocations (``Removal``), put back as it was on exit."""
        return Removal(self)

    def update(self, allocations: Iterable[Allocation]) -> None:
        """Become the free capacity with ``allocations`` held: the nodes whose allocations
        changed are worked out again, the others kept. When few allocation objects came or
        went since the last update (a tuple of them, as the simulator's), only their nodes
        are looked at."""
        self.renewed_more = set()
        present = None
        if isinstance(allocations, tuple):
            present = allocations_by_key(self.state, allocations)
            if len(present) != len(allocations):
                present = None
        known, self._present = self._present, present
        if present is not None and known is not None:
            gone, come = allocations_changed(self.state, known, present)
            if len(gone) + len(come) <= len(present) // 4:
                names = {allocation.node for allocation in gone}
                names.update(allocation.node for allocation in come)
                found: dict[str, list[Allocation]] = {}
                for allocation in allocations:
                    if allocation.node in names:
                        found.setdefault(allocation.node, []).append(allocation)
                for name in names:
                    held = tuple(sorted(found.get(name, ()), key=_allocation_order))
                    for rank in self.ranks.get(name, ()):
                        self._renew(rank, held if self.holds[rank] else ())
                return
        held = held_by_node(allocations, self.state)
        for rank, source in enumerate(self.sources):
            self._renew(rank, held.get(source.name, ()) if self.holds[rank] else ())

    def _renew(self, rank: int, held: tuple[Allocation, ...]) -> None:
        """The node of ``rank`` with ``held``, worked out again if they changed."""
        if _same(self.held[rank], held):
            return
        old = self.nodes[rank]
        self._unindex_node(old)
        node = _node_state(self.sources[rank], rank, held, self.state)
        if _more_free(node, _free_of(old)):
            self.renewed_more.add(rank)
        self.nodes[rank] = node
        self.held[rank] = held
        if self.by_name.get(node.name) is old:
            self.by_name[node.name] = node
        self._index_node(node)

    def _unindex_node(self, node: NodeState) -> None:
        bucket = self.buckets[node.free_count]
        del bucket[bisect_left(bucket, node.rank)]
        for gpu in node.gpus:
            if gpu.is_shared:
                self._unindex(gpu)

    def _index_node(self, node: NodeState) -> None:
        node.free_count = node.count_free()
        insort(self.buckets[node.free_count], node.rank)
        for gpu in node.gpus:
            if gpu.is_shared:
                insort(self.shared, gpu.key())

    def grown(self) -> set[int] | None:
        """The ranks of the nodes with more free now than the last cycle left them with
        (after its placements, before ``rollback``); None: no cycle before to compare with."""
        if self.ends is None:
            return None
        grown = set(self.renewed_more)
        nodes = self.nodes
        grown.update(rank for rank, free in self.ends.items() if _more_free(nodes[rank], free))
        return grown

    def gpu_at(self, key: GpuKey) -> GpuState:
        return self.nodes[key[2]].gpus[key[3]]

    def nodes_by_free_count(self, least: int) -> Iterator[NodeState]:
        """Nodes with at least ``least`` free whole GPUs: fewest free first, then by name."""
        for count in range(max(least, 0), self.max_gpus + 1):
            for rank in self.buckets[count]:
                yield self.nodes[rank]

    def shared_from(self, least_share: float) -> Iterator[GpuState]:
        """Partly used GPUs with about ``least_share`` free or more: least free share first."""
        start = bisect_left(self.shared, (least_share - 2 * SHARE_EPSILON,))
        for key in self.shared[start:]:
            yield self.gpu_at(key)

    def free_share(self) -> float:
        """The GPUs free, shares of partly used ones included."""
        whole = sum(len(self.buckets[count]) * count for count in range(1, self.max_gpus + 1))
        return whole + sum(self.gpu_at(key).free_share for key in self.shared)

    def largest_free_block(self) -> int:
        for count in range(self.max_gpus, 0, -1):
            if self.buckets[count]:
                return count
        return 0

    def take(self, claim: Claim, cpus: float, memory_bytes: int) -> None:
        """Subtract a placement from the free capacity and keep the indexes in step."""
        node = claim.node
        self._touch(node)
        node.cpus -= cpus
        node.memory_bytes -= memory_bytes
        node.version += 1
        taken = 0  # GPUs free before and not after
        for gpu, share, memory in claim.parts:
            if gpu.is_shared:
                self._unindex(gpu)
            was_free = gpu.free
            gpu.hold(share, memory)
            taken += was_free and not gpu.free
            if gpu.is_shared:
                insort(self.shared, gpu.key())
        if taken:
            self._rebucket(node, node.free_count - taken)

    def give_back(self, claim: Claim, cpus: float, memory_bytes: int) -> None:
        """Undo ``take`` (a gang whose later tasks found no room starts none of its tasks)."""
        node = claim.node
        self._touch(node)
        node.cpus += cpus
        node.memory_bytes += memory_bytes
        node.version += 1
        freed = 0
        for gpu, share, memory in claim.parts:
            if gpu.is_shared:
                self._unindex(gpu)
            was_free = gpu.free
            gpu.unhold(share, memory)
            freed += gpu.free and not was_free
            if gpu.is_shared:
                insort(self.shared, gpu.key())
        if freed:
            self._rebucket(node, node.free_count + freed)

    def _unindex(self, gpu: GpuState) -> None:
        at = bisect_left(self.shared, gpu.key())
        del self.shared[at]

    def _rebucket(self, node: NodeState, count: int) -> None:
        bucket = self.buckets[node.free_count]
        del bucket[bisect_left(bucket, node.rank)]
        insort(self.buckets[count], node.rank)
        node.free_count = count


class Removal:
    """Allocations given back to the free capacity for a while, as if their jobs had ended,
    then every node put back as it was (Kueue's ``SimulateWorkloadRemoval`` and its
    restore): preemption asks the one model of a node that placement uses what would fit
    once some victims end. Its indexes are kept in step, and the cycle's journal is not
    told: nothing is left changed. Used as a context manager (``restore`` on exit)."""

    __slots__ = ("_capacity", "_saved")

    def __init__(self, capacity: FreeCapacity) -> None:
        self._capacity = capacity
        # by rank: the node before its first removal, and its packer's state then
        self._saved: dict[int, tuple[tuple, tuple[int, tuple] | None]] = {}

    def __enter__(self) -> Removal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def remove(self, node: NodeState, allocations: Iterable[Allocation]) -> None:
        """Give back what ``allocations`` (a job's, say) hold on ``node``, a node of the
        capacity: those on other nodes are passed over."""
        name = node.name
        mine = [allocation for allocation in allocations if allocation.node == name]
        if not mine:
            return
        capacity, saved = self._capacity, self._saved
        if node.rank not in saved:
            saved[node.rank] = (_used_of(node), node.packed)
        capacity._unindex_node(node)
        by_uuid = node.by_uuid
        for allocation in mine:
            node.cpus += allocation.cpus
            node.memory_bytes += allocation.memory_bytes
            for part in allocation.gpus:
                gpu = by_uuid.get(part.uuid)
                if gpu is not None:  # a GPU the node no longer reports frees nothing
                    gpu.unhold(part.share, part.memory_bytes)
        node.version += 1
        capacity._index_node(node)

    def restore(self) -> None:
        """Every node removed from as it was before, and its indexes."""
        saved, self._saved = self._saved, {}
        nodes = self._capacity.nodes
        for rank, (used, packed) in saved.items():
            self._capacity._put_back(nodes[rank], used, packed)


def _used_of(node: NodeState) -> tuple:
    """What a node has in use (its version too), as ``FreeCapacity._put_back`` takes it."""
    return (
        node.cpus,
        node.memory_bytes,
        node.version,
        [(gpu.used_share, gpu.used_memory, gpu.whole, gpu.free) for gpu in node.gpus],
    )


def _free_of(node: NodeState) -> tuple:
    """What a node has free: CPUs, memory, and each GPU's free share and memory."""
    return (
        node.cpus,
        node.memory_bytes,
        tuple((gpu.free_share, gpu.free_memory) for gpu in node.gpus),
    )


def _more_free(node: NodeState, then: tuple) -> bool:
    """Whether ``node`` has more of anything free than ``then`` (``_free_of``)."""
    cpus, memory_bytes, gpus = then
    if node.cpus > cpus + CPU_EPSILON or node.memory_bytes > memory_bytes:
        return True
    if len(gpus) != len(node.gpus):
        return True
    return any(
        gpu.free_share > share + SHARE_EPSILON or gpu.free_memory > memory
        for gpu, (share, memory) in zip(node.gpus, gpus, strict=True)
    )


def _allocation_order(allocation: Allocation) -> tuple:
    return (allocation.node, allocation.job_id, allocation.task)


# Snapshots of one pool share their (frozen) nodes and, between changes, their tuple of
# allocations, and a node's allocations change seldom: what depends on them alone is kept
# on the state from one cycle to the next, by node name (an entry counts for its object only).


def _static(
    node: NodeCapacity, state: SchedulerState
) -> tuple[tuple[GpuCapacity, ...], frozenset[str]]:
    """A node's GPUs in index order and their models."""
    found = state.node_gpus.get(node.name)
    if found is None or found[0] is not node:
        ordered = tuple(sorted(node.gpus, key=lambda gpu: gpu.index))
        entry = (node, ordered, frozenset(gpu.model for gpu in ordered))
        found = remembered(state.node_gpus, node.name, entry)
    return found[1], found[2]


def held_by_node(
    allocations: Iterable[Allocation], state: SchedulerState
) -> dict[str, tuple[Allocation, ...]]:
    """The allocations by node name, each node's in the order they are held (the last
    tuple's grouping is kept: a cycle asks for it more than once)."""
    last, groups = state.held_by_node
    if last is allocations:
        return groups
    found: dict[str, list[Allocation]] = {}
    for allocation in sorted(allocations, key=_allocation_order):
        found.setdefault(allocation.node, []).append(allocation)
    groups = {name: tuple(held) for name, held in found.items()}
    if isinstance(allocations, tuple):
        state.held_by_node = (allocations, groups)
    return groups


def _same(one: tuple, other: tuple) -> bool:
    """The same allocations: the same objects, or equal ones (a server reads them anew)."""
    return len(one) == len(other) and all(a is b or a == b for a, b in zip(one, other, strict=True))


def _node_state(
    node: NodeCapacity, rank: int, held: tuple[Allocation, ...], state: SchedulerState
) -> NodeState:
    """A node's state with ``held`` (its allocations, in hold order) subtracted."""
    ordered, models = _static(node, state)
    found = state.node_held.get(node.name)
    if found is not None and found[0] is node and _same(found[1], held):
        cpus, memory_bytes, used = found[2]
        gpus = [
            GpuState(
                gpu.uuid, gpu.index, gpu.memory_bytes, gpu.model, gpu.domain, rank, position, *state
            )
            for position, (gpu, state) in enumerate(zip(ordered, used, strict=True))
        ]
        by_uuid = {gpu.uuid: gpu for gpu in gpus}
    else:
        gpus = [
            GpuState(gpu.uuid, gpu.index, gpu.memory_bytes, gpu.model, gpu.domain, rank, position)
            for position, gpu in enumerate(ordered)
        ]
        by_uuid = {gpu.uuid: gpu for gpu in gpus}
        cpus, memory_bytes = node.cpus, node.memory_bytes
        for allocation in held:
            cpus -= allocation.cpus
            memory_bytes -= allocation.memory_bytes
            for part in allocation.gpus:
                gpu = by_uuid.get(part.uuid)
                if gpu is not None:
                    gpu.hold(part.share, part.memory_bytes)
        used = tuple((gpu.used_share, gpu.used_memory, gpu.whole, gpu.free) for gpu in gpus)
        remembered(state.node_held, node.name, (node, held, (cpus, memory_bytes, used)))
    return NodeState(node.name, rank, gpus, by_uuid, cpus, memory_bytes, models)


def same_pool(one: Sequence[NodeCapacity], other: Sequence[NodeCapacity]) -> bool:
    """The same nodes, whatever they hold (``NodeCapacity.holds`` changes as nodes fetch,
    and free capacity does not depend on it)."""
    if one is other or one == other:
        return True
    return len(one) == len(other) and all(
        a is b or a == b or (a.holds != b.holds and replace(a, holds=b.holds) == b)
        for a, b in zip(one, other, strict=True)
    )


def build_capacity(
    nodes: Sequence[NodeCapacity],
    allocations: Iterable[Allocation],
    state: SchedulerState | None = None,
) -> FreeCapacity:
    """Phase 1 of a cycle: the free capacity of the schedulable nodes."""
    return FreeCapacity([node for node in nodes if node.schedulable], allocations, state)


@contextmanager
def leased_capacity(
    state: SchedulerState, nodes: Sequence[NodeCapacity], allocations: Iterable[Allocation]
) -> Iterator[FreeCapacity]:
    """The free capacity for one cycle, which may change it as it likes: the state's, kept
    for the next cycle over the same nodes, brought up to date (``update``: only nodes whose
    allocations changed) instead of built anew, and put back as it was after the cycle
    (``rollback``). A cycle that fails leaves the state none (nothing half changed)."""
    kept, state.capacity = state.capacity, None
    if kept is not None and same_pool(kept[0], nodes):
        capacity = kept[1]
        capacity.update(allocations)
    else:
        capacity = build_capacity(nodes, allocations, state)
    capacity.journal()
    yield capacity
    capacity.rollback()
    state.capacity = (nodes, capacity)
