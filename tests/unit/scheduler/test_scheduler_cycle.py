"""The scheduling cycle on small, hand-built pools."""

from __future__ import annotations

from tests.support.clock import ManualClock
from tests.support.scheduling import (
    BEST_FIT,
    allocation,
    gpu_uuid,
    job,
    node,
    placed,
    run,
    snapshot,
)

from gpupool.domain.jobs import Reason
from gpupool.domain.units import GiB
from gpupool.scheduler import schedule
from gpupool.scheduler.messages import CPU_HINT, MEMORY_HINT
from gpupool.scheduler.types import GpuShare


def test_one_gpu_job_is_placed():
    decisions = run([node("node-a").gpus(1)], [job(1).gpus(1)])

    assert placed(decisions) == {1: ("node-a", (GpuShare(gpu_uuid("node-a", 0), 1.0, 80 * GiB),))}
    assert decisions.pending == {}
    assert decisions.placements[0].cpus == 1.0
    assert decisions.placements[0].memory_bytes == 0


def test_two_half_gpu_jobs_share_one_gpu():
    decisions = run([node("node-a").gpus(2)], [job(1).gpus(0.5), job(2).gpus(0.5)])

    uuids = {gpus[0].uuid for _, gpus in placed(decisions).values()}
    assert uuids == {gpu_uuid("node-a", 0)}
    assert all(
        g.share == 0.5 and g.memory_bytes == 40 * GiB for p in decisions.placements for g in p.gpus
    )


def test_fractions_pack_onto_the_shared_gpu_with_least_room():
    decisions = run(
        [node("node-a").gpus(3)],
        [job(1).gpus(0.25)],
        allocations=[
            allocation(10, "node-a", (0, 0.5, 40 * GiB)),
            allocation(11, "node-a", (1, 0.7, 10 * GiB)),
        ],
    )

    assert placed(decisions)[1][1][0].uuid == gpu_uuid("node-a", 1)


def test_gpu_memory_is_respected_for_fractions():
    decisions = run(
        [node("node-a").gpus(1, memory=24 * GiB)],
        [job(1).gpus(0.25).gpu_memory(16 * GiB), job(2).gpus(0.25).gpu_memory(16 * GiB)],
    )

    assert set(placed(decisions)) == {1}
    reason = decisions.pending[2]
    assert reason.code is Reason.INSUFFICIENT_GPU_MEMORY
    assert reason.message == (
        "needs 0.25 of a GPU with 16 GiB free; "
        "the most free on any GPU is 0.75 with 8 GiB on node-a"
    )


def test_gpu_memory_only_request_takes_a_proportional_share():
    decisions = run([node("node-a").gpus(1, memory=40 * GiB)], [job(1).gpu_memory(10 * GiB)])

    assert placed(decisions)[1][1] == (GpuShare(gpu_uuid("node-a", 0), 0.25, 10 * GiB),)


def test_whole_gpu_not_given_where_a_fraction_is_used():
    decisions = run(
        [node("node-a").gpus(2)],
        [job(1).gpus(1)],
        allocations=[allocation(10, "node-a", (0, 0.25, 20 * GiB))],
    )

    assert placed(decisions)[1][1][0].uuid == gpu_uuid("node-a", 1)


def test_fraction_not_put_on_a_gpu_held_whole():
    decisions = run(
        [node("node-a").gpus(1)],
        [job(1).gpus(0.5)],
        allocations=[allocation(10, "node-a", (0, 1.0, 80 * GiB))],
    )

    assert decisions.placements == []
    assert decisions.pending[1].code is Reason.INSUFFICIENT_GPUS
    assert decisions.pending[1].message == "needs 0.5 of a GPU; every GPU is fully used"


def test_fresh_gpu_for_a_fraction_comes_from_the_node_with_fewest_free():
    decisions = run(
        [node("node-a").gpus(4), node("node-b").gpus(2)],
        [job(1).gpus(0.5)],
    )

    assert placed(decisions)[1][0] == "node-b"


def test_four_gpu_job_waits_when_only_two_are_free():
    decisions = run(
        [node("node-a").gpus(4), node("node-b").gpus(2)],
        [job(1).gpus(4)],
        allocations=[allocation(10, "node-a", (0, 1.0, 80 * GiB), (1, 1.0, 80 * GiB))],
    )

    reason = decisions.pending[1]
    assert reason.code is Reason.INSUFFICIENT_GPUS
    assert reason.message == "needs 4 GPUs on one node; the largest free block is 2 on node-a"
    assert reason.position == 1


def test_multi_gpu_job_goes_to_the_best_fitting_node_in_index_order():
    # best fit; the product's packing weighs the workload too (test_packing.py)
    decisions = run(
        [node("node-a").gpus(8), node("node-b").gpus(4), node("node-c").gpus(2)],
        [job(1).gpus(2), job(2).gpus(3)],
        policy=BEST_FIT,
    )

    jobs = placed(decisions)
    assert jobs[1][0] == "node-c"
    assert jobs[2][0] == "node-b"
    assert [g.uuid for g in jobs[2][1]] == [gpu_uuid("node-b", i) for i in range(3)]


def test_whole_gpus_need_enough_memory_each():
    decisions = run(
        [node("node-a").gpus(2, memory=40 * GiB), node("node-b").gpus(2, memory=80 * GiB)],
        [job(1).gpus(2).gpu_memory(80 * GiB)],
    )

    assert placed(decisions)[1][0] == "node-b"


def test_priority_then_submit_order_within_a_team():
    decisions = run(
        [node("node-a").gpus(2)],
        [
            job(1).submitted(10),
            job(2).priority(5).submitted(30),
            job(3).submitted(5),
            job(4).submitted(5),
        ],
    )
    order = [p.job_id for p in decisions.placements]
    assert order == [2, 3, 4, 1]


def test_priority_decides_who_gets_the_last_gpu():
    decisions = run(
        [node("node-a").gpus(1)],
        [job(1).gpus(1).submitted(1), job(2).gpus(1).priority(10).submitted(2)],
    )

    assert set(placed(decisions)) == {2}
    assert decisions.pending[1].position == 2


def test_round_robin_across_teams():
    jobs = [job(i).team("team-a").gpus(1) for i in range(1, 4)]
    jobs += [job(i).team("team-b").gpus(1) for i in range(11, 14)]
    decisions = run([node("node-a").gpus(4)], jobs)

    assert [p.job_id for p in decisions.placements] == [1, 11, 2, 12]
    assert {j: r.position for j, r in decisions.pending.items()} == {3: 3, 13: 3}


def test_best_effort_fifo_a_big_job_does_not_block_small_ones():
    decisions = run(
        [node("node-a").gpus(2)],
        [job(1).gpus(2).priority(5), job(2).gpus(2).priority(5), job(3).gpus(0.5)],
    )

    assert set(placed(decisions)) == {1}
    assert decisions.pending[2].code is Reason.INSUFFICIENT_GPUS

    decisions = run(
        [node("node-a").gpus(2)],
        [job(1).gpus(4).priority(5), job(2).gpus(1)],
    )
    assert set(placed(decisions)) == {2}
    assert decisions.pending[1].code is Reason.NO_NODE_BIG_ENOUGH


def test_cpu_limit():
    decisions = run(
        [node("node-a").gpus(2).cpus(8)],
        [job(1).gpus(1).cpus(6), job(2).gpus(1).cpus(4)],
    )

    assert set(placed(decisions)) == {1}
    reason = decisions.pending[2]
    assert reason.code is Reason.INSUFFICIENT_CPU
    assert reason.message == (
        f"needs 4 CPUs; the most free on a node with room for its GPUs is 2 on node-a; {CPU_HINT}"
    )


def test_memory_limit():
    decisions = run(
        [node("node-a").memory(64 * GiB)],
        [job(1).memory(48 * GiB), job(2).memory(32 * GiB)],
    )

    assert set(placed(decisions)) == {1}
    reason = decisions.pending[2]
    assert reason.code is Reason.INSUFFICIENT_MEMORY
    assert reason.message == (
        "needs 32 GiB of memory; the most free on a node with room for its CPUs is 16 GiB on node-a"
        f"; {MEMORY_HINT}"
    )


def test_cpu_only_job_prefers_a_node_without_free_gpus():
    decisions = run([node("node-a").gpus(2), node("node-b")], [job(1).cpus(4)])

    assert placed(decisions) == {1: ("node-b", ())}


def test_allocations_count_against_cpus_and_memory():
    decisions = run(
        [node("node-a").gpus(3).cpus(9).memory(32 * GiB)],
        [job(1).gpus(1).cpus(2), job(2).gpus(1).memory(16 * GiB)],
        allocations=[allocation(10, "node-a", (0, 1.0, 80 * GiB), cpus=6, memory=24 * GiB)],
    )

    assert set(placed(decisions)) == {1}
    assert decisions.pending[2].code is Reason.INSUFFICIENT_MEMORY
    assert decisions.pending[2].message == (
        "needs 16 GiB of memory; the most free on a node with room for its GPUs and CPUs is 8 GiB"
        f" on node-a; {MEMORY_HINT}"
    )


def test_unschedulable_nodes_are_skipped():
    decisions = run(
        [node("node-a").gpus(8).unschedulable(), node("node-b").gpus(1)],
        [job(1).gpus(1), job(2).gpus(1), job(3).gpus(2)],
    )

    assert placed(decisions) == {1: ("node-b", (GpuShare(gpu_uuid("node-b", 0), 1.0, 80 * GiB),))}
    assert decisions.pending[2].code is Reason.INSUFFICIENT_GPUS
    assert decisions.pending[3].code is Reason.NO_NODE_BIG_ENOUGH
    assert decisions.pending[3].message == (
        "needs 2 GPUs on one node; the largest node has 1 GPU (node-b)"
    )


def test_no_schedulable_nodes():
    decisions = run([node("node-a").gpus(8).unschedulable()], [job(1).gpus(1), job(2)])

    assert {r.code for r in decisions.pending.values()} == {Reason.NO_NODES}
    assert decisions.placements == []


def test_allocations_on_unknown_nodes_and_gpus_are_ignored():
    decisions = run(
        [node("node-a").gpus(1)],
        [job(1).gpus(1)],
        allocations=[allocation(10, "gone", (0, 1.0, 80 * GiB)), allocation(11, "node-a")],
    )

    assert set(placed(decisions)) == {1}


def test_same_input_gives_the_same_decisions():
    nodes = [node(f"node-{i}").gpus(i % 4 + 1).cpus(16) for i in range(6)]
    jobs = [
        job(i).team(f"team-{i % 3}").gpus([1, 0.5, 2, 0.25, 3][i % 5]).priority(i % 2)
        for i in range(40)
    ]
    snap = snapshot(nodes, jobs)

    first = schedule(snap, ManualClock())
    second = schedule(snap, ManualClock(5_000.0))
    reversed_input = schedule(snapshot(reversed(nodes), reversed(jobs)), ManualClock())

    assert first == second
    assert first == reversed_input
    assert list(first.pending) == list(reversed_input.pending)
