"""Properties of placement and reasons over random pools, allocations and requests.

Running work here is non-preemptible, so these properties are about placement alone; the
policy's properties (quotas, preemption, gangs) are in test_policy_properties.py.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.domain.units import GiB
from gpupool.scheduler import infeasible_reason, schedule
from gpupool.scheduler.types import (
    Allocation,
    Decisions,
    GpuCapacity,
    GpuShare,
    NodeCapacity,
    PendingJob,
    Snapshot,
)
from tests.support.clock import ManualClock

EPS = 1e-9
GPU_MEMORY = [16 * GiB, 24 * GiB, 40 * GiB, 80 * GiB]
SHARES = [0.1, 0.25, 0.3, 0.5, 0.75]


@st.composite
def node_capacities(draw, name: str) -> NodeCapacity:
    gpu_count = draw(st.integers(0, 4))
    gpus = tuple(
        GpuCapacity(f"GPU-{name}-{i}", i, "test", draw(st.sampled_from(GPU_MEMORY)))
        for i in range(gpu_count)
    )
    cpus = draw(st.sampled_from([2.0, 4.0, 8.0, 16.0]))
    memory = draw(st.sampled_from([8 * GiB, 16 * GiB, 64 * GiB]))
    schedulable = draw(st.booleans().filter(lambda b: b) | st.booleans())
    return NodeCapacity(name, gpus, cpus, memory, schedulable)


@st.composite
def gpu_uses(draw, gpu: GpuCapacity) -> list[GpuShare]:
    kind = draw(st.sampled_from(["free", "whole", "shared"]))
    if kind == "free":
        return []
    if kind == "whole":
        return [GpuShare(gpu.uuid, 1.0, gpu.memory_bytes)]
    uses, share_left, memory_left = [], 1.0, gpu.memory_bytes
    for share in draw(st.lists(st.sampled_from(SHARES), min_size=1, max_size=3)):
        if share > share_left + EPS:
            break
        memory = draw(st.integers(0, memory_left))
        uses.append(GpuShare(gpu.uuid, share, memory))
        share_left -= share
        memory_left -= memory
    return uses


@st.composite
def node_allocations(draw, node: NodeCapacity, first_id: int) -> list[Allocation]:
    parts = [use for gpu in node.gpus for use in draw(gpu_uses(gpu))]
    parts += [None] * draw(st.integers(0, 2))  # allocations without GPUs
    cpus_left, memory_left = node.cpus, node.memory_bytes
    allocations = []
    for offset, part in enumerate(parts):
        cpus = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
        cpus = cpus if cpus <= cpus_left else 0.0
        memory = draw(st.integers(0, memory_left // 2))
        cpus_left -= cpus
        memory_left -= memory
        gpus = () if part is None else (part,)
        allocations.append(
            Allocation(first_id + offset, node.name, gpus, cpus, memory, preemptible=False)
        )
    return allocations


@st.composite
def requests(draw) -> ResourceRequest:
    gpus = draw(st.sampled_from([None, None, 0.1, 0.25, 0.5, 0.75, 1, 1, 2, 3, 5]))
    gpu_memory = draw(st.sampled_from([None, None, 4 * GiB, 16 * GiB, 40 * GiB, 100 * GiB]))
    cpus = draw(st.sampled_from([0.5, 1.0, 2.0, 4.0, 20.0]))
    memory = draw(st.sampled_from([None, 1 * GiB, 8 * GiB, 32 * GiB]))
    return ResourceRequest(gpus=gpus, gpu_memory_bytes=gpu_memory, cpus=cpus, memory_bytes=memory)


@st.composite
def snapshots(draw) -> Snapshot:
    names = [f"node-{i}" for i in range(draw(st.integers(0, 4)))]
    nodes = tuple(draw(node_capacities(name)) for name in names)
    allocations = []
    for node in nodes:
        allocations += draw(node_allocations(node, 10_000 + len(allocations)))
    count = draw(st.integers(0, 25))
    pending = tuple(
        PendingJob(
            job_id=i,
            team=draw(st.sampled_from(["a", "b", "c"])),
            user="u",
            priority=draw(st.sampled_from([-1, 0, 1])),
            submitted_at=float(draw(st.integers(0, 5))),
            request=draw(requests()),
        )
        for i in range(count)
    )
    return Snapshot(nodes, tuple(allocations), pending)


@dataclass
class Usage:
    """What is held of each GPU and node, counted from the decisions independently."""

    gpu_parts: dict[str, list[GpuShare]] = field(default_factory=lambda: defaultdict(list))
    cpus: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    memory: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, node: str, gpus: tuple[GpuShare, ...], cpus: float, memory: int) -> None:
        for part in gpus:
            self.gpu_parts[part.uuid].append(part)
        self.cpus[node] += cpus
        self.memory[node] += memory


def usage_after(snapshot: Snapshot, decisions: Decisions) -> Usage:
    usage = Usage()
    for held in (*snapshot.allocations, *decisions.placements):
        usage.add(held.node, held.gpus, held.cpus, held.memory_bytes)
    return usage


def fits(request: ResourceRequest, node: NodeCapacity, usage: Usage) -> bool:
    """Brute force: does ``request`` fit ``node`` given ``usage``?"""
    if node.cpus - usage.cpus[node.name] < request.cpus - EPS:
        return False
    if node.memory_bytes - usage.memory[node.name] < (request.memory_bytes or 0):
        return False
    if request.whole_gpus:
        least = request.gpu_memory_bytes or 0
        free = [g for g in node.gpus if not usage.gpu_parts[g.uuid] and g.memory_bytes >= least]
        return len(free) >= request.whole_gpus
    if request.is_fractional:
        return any(_fraction_fits(request, gpu, usage.gpu_parts[gpu.uuid]) for gpu in node.gpus)
    return True


def _fraction_fits(request: ResourceRequest, gpu: GpuCapacity, parts: list[GpuShare]) -> bool:
    if any(part.share >= 1 - EPS for part in parts):
        return False
    if request.gpus:
        share = request.gpus
        memory = request.gpu_memory_bytes
        memory = int(request.gpus * gpu.memory_bytes) if memory is None else memory
    else:
        memory = request.gpu_memory_bytes
        share = min(1.0, memory / gpu.memory_bytes)
    used_share = sum(part.share for part in parts)
    used_memory = sum(part.memory_bytes for part in parts)
    return used_share + share <= 1 + EPS and used_memory + memory <= gpu.memory_bytes


SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(snapshots())
def test_cycle_invariants(snapshot: Snapshot):
    decisions = schedule(snapshot, ManualClock())
    check_nothing_over_admitted(snapshot, decisions)
    check_placements_match_requests(snapshot, decisions)
    check_placed_or_true_reason(snapshot, decisions)
    check_positions(snapshot, decisions)


def check_nothing_over_admitted(snapshot: Snapshot, decisions: Decisions) -> None:
    usage = usage_after(snapshot, decisions)
    for node in snapshot.nodes:
        assert usage.cpus[node.name] <= node.cpus + 1e-6
        assert usage.memory[node.name] <= node.memory_bytes
        for gpu in node.gpus:
            parts = usage.gpu_parts[gpu.uuid]
            assert sum(part.share for part in parts) <= 1 + 1e-6
            assert sum(part.memory_bytes for part in parts) <= gpu.memory_bytes
            if any(part.share >= 1 - EPS for part in parts):
                assert len(parts) == 1, "a GPU held whole is shared"


def check_placements_match_requests(snapshot: Snapshot, decisions: Decisions) -> None:
    nodes = {node.name: node for node in snapshot.nodes}
    requests_by_id = {job.job_id: job.request for job in snapshot.pending}
    for placement in decisions.placements:
        request = requests_by_id[placement.job_id]
        node = nodes[placement.node]
        gpus = {gpu.uuid: gpu for gpu in node.gpus}
        assert node.schedulable
        assert placement.cpus == request.cpus
        assert placement.memory_bytes == (request.memory_bytes or 0)
        assert all(part.uuid in gpus for part in placement.gpus)
        assert len({part.uuid for part in placement.gpus}) == len(placement.gpus)
        if request.whole_gpus:
            assert len(placement.gpus) == request.whole_gpus
            least = request.gpu_memory_bytes or 0
            assert all(part.share == 1.0 for part in placement.gpus)
            assert all(gpus[part.uuid].memory_bytes >= least for part in placement.gpus)
        elif request.is_fractional:
            assert len(placement.gpus) == 1
            assert 0 < placement.gpus[0].share <= 1
        else:
            assert placement.gpus == ()


def check_placed_or_true_reason(snapshot: Snapshot, decisions: Decisions) -> None:
    placed = [placement.job_id for placement in decisions.placements]
    assert len(placed) == len(set(placed))
    assert set(placed).isdisjoint(decisions.pending)
    assert set(placed) | set(decisions.pending) == {job.job_id for job in snapshot.pending}

    usage = usage_after(snapshot, decisions)
    schedulable = [node for node in snapshot.nodes if node.schedulable]
    for job in snapshot.pending:
        reason = decisions.pending.get(job.job_id)
        if reason is None:
            continue
        assert reason.job_id == job.job_id and reason.message
        assert not any(fits(job.request, node, usage) for node in schedulable)
        never = infeasible_reason(job.request, schedulable)
        if not schedulable:
            assert reason.code is Reason.NO_NODES
        elif never is not None:
            assert (reason.code, reason.message) == (Reason.NO_NODE_BIG_ENOUGH, never)
        else:
            assert reason.code in {
                Reason.FAIR_SHARE,
                Reason.INSUFFICIENT_GPUS,
                Reason.INSUFFICIENT_GPU_MEMORY,
                Reason.INSUFFICIENT_CPU,
                Reason.INSUFFICIENT_MEMORY,
            }


@SETTINGS
@given(snapshots())
def test_infeasible_means_no_empty_node_fits(snapshot: Snapshot):
    empty = Usage()
    for job in snapshot.pending:
        could = any(fits(job.request, node, empty) for node in snapshot.nodes)
        assert (infeasible_reason(job.request, snapshot.nodes) is None) == (
            could or not snapshot.nodes
        )


def check_positions(snapshot: Snapshot, decisions: Decisions) -> None:
    queues = defaultdict(list)
    for job in snapshot.pending:
        queues[job.team].append(job)
    for queue in queues.values():
        queue.sort(key=lambda job: (-job.priority, job.submitted_at, job.job_id))
        for position, job in enumerate(queue, start=1):
            if job.job_id in decisions.pending:
                assert decisions.pending[job.job_id].position == position


@SETTINGS
@given(snapshots())
def test_same_input_same_output(snapshot: Snapshot):
    first = schedule(snapshot, ManualClock())
    again = schedule(snapshot, ManualClock(2_000.0))
    shuffled = Snapshot(
        tuple(reversed(snapshot.nodes)),
        tuple(reversed(snapshot.allocations)),
        tuple(reversed(snapshot.pending)),
    )
    assert first == again == schedule(shuffled, ManualClock())
