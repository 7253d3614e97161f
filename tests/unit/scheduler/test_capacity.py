"""Free capacity (``capacity``): the capacity kept from one cycle to the next, a removal of
allocations for a while and its restore, and nodes that take no new work."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler import capacity as capacity_module
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.types import Decisions, Snapshot
from tests.support.clock import ManualClock
from tests.support.scheduling import (
    LEVEL_2,
    NOW,
    codes,
    decide,
    down,
    drained,
    fresh,
    gpu_node,
    pending,
    placed_ids,
    running,
    victims,
)
from tests.unit.scheduler.test_policy_properties import SETTINGS, long_queues


def applied(snapshot: Snapshot, decisions: Decisions) -> Snapshot:
    """The next snapshot: the placed jobs run, the preempted ones and the first running job
    are gone (ended), the nominations stand."""
    jobs = {job.job_id: job for job in snapshot.pending}
    gone = {preemption.job_id for preemption in decisions.preemptions}
    if snapshot.allocations:
        gone.add(snapshot.allocations[0].job_id)
    allocations = [a for a in snapshot.allocations if a.job_id not in gone]
    by_job: dict[int, list] = {}
    for placement in decisions.placements:
        by_job.setdefault(placement.job_id, []).append(placement)
    for job_id, placements in by_job.items():
        allocations.extend(jobs[job_id].started(placements, ManualClock(NOW).now()))
    return replace(
        snapshot,
        allocations=tuple(allocations),
        pending=tuple(job for job in snapshot.pending if job.job_id not in by_job),
        nominations=dict(decisions.nominations),
    )


@SETTINGS
@given(long_queues())
def test_cycles_over_the_kept_capacity_decide_as_over_a_new_one(snapshot: Snapshot):
    state = SchedulerState()
    for _ in range(3):
        decisions = schedule(snapshot, ManualClock(NOW), state)
        assert decisions == fresh(snapshot)
        assert state.capacity is not None
        assert schedule(snapshot, ManualClock(NOW), state) == decisions  # it was put back
        snapshot = applied(snapshot, decisions)


def test_a_cycle_that_fails_leaves_the_next_one_a_whole_capacity(monkeypatch):
    nodes = (gpu_node("node-a", 4), gpu_node("node-b", 2))
    held = (running(100, "node-a", [0, 1]),)
    jobs = (pending(1, gpus=2), pending(2, gpus=2), pending(3, gpus=1))
    snapshot = Snapshot(nodes, held, jobs, policy=DEFAULT_POLICY)
    expected = fresh(snapshot)
    run = Cycle.run

    def fails_after_placing(self):  # noqa: ANN001, ANN202
        run(self)  # its placements changed the kept capacity
        raise RuntimeError("a bug")

    state = SchedulerState()
    schedule(snapshot, ManualClock(NOW), state)
    monkeypatch.setattr(Cycle, "run", fails_after_placing)
    with pytest.raises(RuntimeError):
        schedule(snapshot, ManualClock(NOW), state)
    monkeypatch.setattr(Cycle, "run", run)

    assert (state.capacity, state.order, state.running) == (None, None, None)  # none half kept
    assert schedule(snapshot, ManualClock(NOW), state) == expected
    assert schedule(snapshot, ManualClock(NOW), state) == expected


def capacity_state(capacity: capacity_module.FreeCapacity) -> tuple:
    """Everything a cycle reads of a free capacity."""
    nodes = [
        (
            node.name,
            node.cpus,
            node.memory_bytes,
            node.free_count,
            [(gpu.uuid, gpu.used_share, gpu.used_memory, gpu.whole, gpu.free) for gpu in node.gpus],
        )
        for node in capacity.nodes
    ]
    by_name = sorted((name, node.rank) for name, node in capacity.by_name.items())
    return nodes, by_name, [list(bucket) for bucket in capacity.buckets], list(capacity.shared)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 39), st.integers(0, 5), st.booleans()), max_size=12))
def test_a_few_allocations_come_and_gone_update_only_their_nodes_rightly(changes):
    """Forty allocations, then some ended and some started, a few at a time: the update
    that looks only at their nodes leaves the capacity built anew from them."""
    nodes = tuple(gpu_node(f"node-{index}", 8) for index in range(6))
    held = {
        job: running(job, f"node-{job % 6}", [job % 8], share=0.5 if job % 3 else 1.0)
        for job in range(40)
    }
    capacity = capacity_module.build_capacity(nodes, tuple(held.values()))
    for job, node, ends in changes:
        if ends:
            held.pop(job, None)
        else:  # another task of the job, on a GPU of its own
            held[job + 100] = running(job + 100, f"node-{node}", [job % 8 // 2 + 4], share=0.25)
        allocations = tuple(held.values())
        capacity.update(allocations)
        assert capacity_state(capacity) == capacity_state(
            capacity_module.build_capacity(nodes, allocations)
        )


@SETTINGS
@given(
    st.lists(st.sampled_from([*range(40), *range(100, 140)]), unique=True, max_size=12),
    st.booleans(),
)
def test_a_removal_is_the_capacity_without_them_and_is_restored_whole(removed, journal):
    """Forty jobs on GPUs of their own (whole, halves, quarters; a CPU each) and a quarter
    beside each fraction, some removed for a while (preemption asking
    what would fit once they end): meanwhile the capacity is the one built without them,
    indexes included; restored, it is as before, and a cycle's journal that was open rolls
    back to what it saw, nothing else."""
    nodes = tuple(gpu_node(f"node-{index}", 8) for index in range(6))
    held = {}
    for job in range(40):
        node, gpu, share = f"node-{job % 6}", job // 6, (1.0, 0.5, 0.25)[job % 3]
        held[job] = running(job, node, [gpu], share=share)
        if share < 1:
            held[job + 100] = running(job + 100, node, [gpu], share=0.25)
    capacity = capacity_module.build_capacity(nodes, tuple(held.values()))
    before = capacity_state(capacity)
    if journal:
        capacity.journal()
    with capacity.removal() as removal:
        for job in removed:
            allocation = held.get(job)
            if allocation is None:  # no quarter beside a whole GPU
                continue
            removal.remove(capacity.by_name[allocation.node], (allocation,))
        kept = tuple(allocation for job, allocation in held.items() if job not in removed)
        assert capacity_state(capacity) == capacity_state(
            capacity_module.build_capacity(nodes, kept)
        )
    assert capacity_state(capacity) == before
    if journal:
        capacity.rollback()
        assert capacity_state(capacity) == before
        assert capacity.ends == {}  # a removal is no change of the cycle's


# -- nodes that are not schedulable ----------------------------------------------------------------


# A node that is not schedulable (drained, down or removed: services.nodes.settle) gets no
# new work, by placement or by preemption; what runs there stays.


def test_no_job_is_preempted_to_free_a_drained_nodes_gpu() -> None:
    held = [running(100, "node-a", team="a", attained=LEVEL_2)]

    assert victims(decide([gpu_node("node-a", 1)], [pending(1)], held)) == {100: 1}
    decisions = decide([drained("node-a")], [pending(1)], held)

    assert decisions.preemptions == []
    assert placed_ids(decisions) == set()
    assert codes(decisions) == {1: "NoNodes"}


def test_preemption_frees_the_schedulable_nodes_gpu_and_not_the_drained_ones() -> None:
    nodes = [drained("node-a"), gpu_node("node-b", 1)]
    held = [
        running(100, "node-a", team="a", attained=LEVEL_2 * 2),  # the better victim, if it could
        running(101, "node-b", team="a", attained=LEVEL_2),
    ]

    decisions = decide(nodes, [pending(1)], held)

    assert victims(decisions) == {101: 1}


def test_a_free_drained_node_is_left_empty_and_its_running_job_kept() -> None:
    nodes = [drained("node-a", 2), gpu_node("node-b", 1)]
    held = [running(100, "node-a", [0], team="b")]

    decisions = decide(nodes, [pending(1), pending(2)], held)

    assert {p.job_id: p.node for p in decisions.placements} == {1: "node-b"}
    assert decisions.preemptions == []


def test_drained_and_down_nodes_are_told_apart_and_a_gpu_type_does_not_hide_them() -> None:
    nodes = [drained("node-a"), down("node-b"), down("node-c")]
    decisions = decide(nodes, [pending(1), pending(2, gpu_types=("A100",)), pending(3, gpus=None)])

    said = {job_id: (r.code.value, r.message) for job_id, r in decisions.pending.items()}
    expected = (
        "NoNodes",
        "there are no schedulable nodes in the pool: 1 drained (node-a) and 2 down "
        "(node-b, node-c); it waits until an admin undrains one (gpupool node undrain NAME) or "
        "one is up",
    )
    assert said == {1: expected, 2: expected, 3: expected}
