"""Reasons for waiting jobs (``reasons``) and the submit-time size check."""

from __future__ import annotations

from dataclasses import replace

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.domain.units import GiB
from gpupool.scheduler import infeasible_reason
from gpupool.scheduler.messages import CPU_HINT, MEMORY_HINT
from tests.support.scheduling import allocation, decide, gpu_node, job, node, pending, run


def nodes(*builders):
    return [b.build() for b in builders]


def test_infeasible_too_many_gpus():
    pool = nodes(node("node-a").gpus(8), node("node-b").gpus(4))

    assert infeasible_reason(ResourceRequest(gpus=16), pool) == (
        "needs 16 GPUs on one node; the largest node has 8 GPUs (node-a)"
    )
    assert infeasible_reason(ResourceRequest(gpus=8), pool) is None


def test_infeasible_gpu_memory():
    pool = nodes(node("node-a").gpus(2, memory=40 * GiB), node("node-b").gpus(1))

    assert infeasible_reason(ResourceRequest(gpus=2, gpu_memory_bytes=80 * GiB), pool) == (
        "needs 2 GPUs with at least 80 GiB each on one node; "
        "the largest node has 1 GPU with at least 80 GiB (node-b)"
    )
    assert infeasible_reason(ResourceRequest(gpus=0.5, gpu_memory_bytes=100 * GiB), pool) == (
        "needs 0.5 of a GPU with 100 GiB free; the largest GPU has 80 GiB (node-b)"
    )
    assert infeasible_reason(ResourceRequest(gpu_memory_bytes=80 * GiB), pool) is None


def test_infeasible_without_gpus():
    pool = nodes(node("node-a").cpus(16).memory(64 * GiB))

    assert infeasible_reason(ResourceRequest(gpus=1), pool) == (
        "needs 1 GPU on one node; no node has a GPU"
    )
    assert infeasible_reason(ResourceRequest(gpus=0.5), pool) == (
        "needs 0.5 of a GPU; no node has GPUs"
    )


def test_infeasible_cpu_and_memory():
    pool = nodes(node("node-a").gpus(1).cpus(8), node("node-b").cpus(32).memory(1024 * GiB))

    assert infeasible_reason(ResourceRequest(gpus=1, cpus=16), pool) == (
        "needs 16 CPUs on one node; the largest node with room for its GPUs has 8 CPUs (node-a)"
        f"; {CPU_HINT}"
    )
    assert infeasible_reason(ResourceRequest(cpus=16), pool) is None
    assert infeasible_reason(ResourceRequest(cpus=4, memory_bytes=2048 * GiB), pool) == (
        "needs 2 TiB of memory on one node; the largest node with room for its CPUs has 1 TiB "
        f"(node-b); {MEMORY_HINT}"
    )


def test_infeasible_judges_every_node_given_and_not_an_empty_pool():
    pool = nodes(node("node-a").gpus(8).unschedulable())

    assert infeasible_reason(ResourceRequest(gpus=8), pool) is None
    assert infeasible_reason(ResourceRequest(gpus=8), []) is None


def test_no_node_big_enough_is_the_reason_of_a_job_that_can_never_run():
    decisions = run([node("node-a").gpus(8)], [job(1).gpus(16)])

    reason = decisions.pending[1]
    assert reason.code is Reason.NO_NODE_BIG_ENOUGH
    assert reason.message == "needs 16 GPUs on one node; the largest node has 8 GPUs (node-a)"


def test_fraction_waits_for_share_when_every_gpu_is_too_busy():
    decisions = run(
        [node("node-a").gpus(2, memory=40 * GiB)],
        [job(1).gpus(0.5)],
        allocations=[
            allocation(10, "node-a", (0, 0.75, 10 * GiB)),
            allocation(11, "node-a", (1, 0.6, 30 * GiB)),
        ],
    )

    reason = decisions.pending[1]
    assert reason.code is Reason.INSUFFICIENT_GPUS
    assert reason.message == (
        "needs 0.5 of a GPU; the most free on any GPU is 0.4 with 10 GiB on node-a"
    )


def test_gpu_memory_only_request_waiting_for_memory():
    decisions = run(
        [node("node-a").gpus(1, memory=40 * GiB)],
        [job(1).gpu_memory(30 * GiB)],
        allocations=[allocation(10, "node-a", (0, 0.1, 20 * GiB))],
    )

    reason = decisions.pending[1]
    assert reason.code is Reason.INSUFFICIENT_GPU_MEMORY
    assert reason.message == (
        "needs 30 GiB of GPU memory; the most free on any GPU is 0.9 with 20 GiB on node-a"
    )


def test_whole_gpu_reason_when_nothing_is_free():
    decisions = run(
        [node("node-a").gpus(1), node("node-b").gpus(1)],
        [job(1).gpus(1), job(2).gpus(1), job(3).gpus(1), job(4).gpus(1).gpu_memory(40 * GiB)],
    )

    assert decisions.pending[3].message == "needs 1 GPU on one node; no GPU is free on any node"
    assert decisions.pending[4].message == (
        "needs 1 GPU with at least 40 GiB on one node; "
        "no GPU with at least 40 GiB is free on any node"
    )
    assert decisions.pending[3].position == 3


def test_cpu_only_job_reason():
    decisions = run([node("node-a").cpus(4), node("node-b").cpus(2)], [job(1).cpus(8)])

    assert decisions.pending[1].code is Reason.NO_NODE_BIG_ENOUGH
    assert decisions.pending[1].message == (
        f"needs 8 CPUs on one node; the largest node has 4 CPUs (node-a); {CPU_HINT}"
    )

    decisions = run([node("node-a").cpus(4)], [job(1).cpus(3), job(2).cpus(1.5)])
    assert decisions.pending[2].message == (
        f"needs 1.5 CPUs; the most free on a node is 1 on node-a; {CPU_HINT}"
    )


# -- jobs over several nodes -----------------------------------------------------------------------


# Why a job over several nodes waits when the pool can never hold it: one task per node, so
# a pool of fewer schedulable nodes than tasks (one machine, or the others drained) says
# NoNodeBigEnough, never that the GPUs are reserved for jobs waiting longer.


def gang(job_id: int, tasks: int, gpus: float = 1):  # noqa: ANN201 - a PendingJob
    return replace(pending(job_id, gpus=gpus, tasks=tasks), distinct_nodes=True, one_fabric=True)


def test_a_two_node_job_on_a_pool_of_one_machine_never_fits() -> None:
    decisions = decide([gpu_node("a", 8)], [gang(1, 2)])

    why = decisions.pending[1]
    assert why.code is Reason.NO_NODE_BIG_ENOUGH, why.message
    assert "can never start together" in why.message
    assert "1 schedulable node" in why.message and "a node of its own" in why.message


def test_a_two_node_job_whose_other_node_is_drained_never_fits_while_it_is() -> None:
    drained = replace(gpu_node("b", 8), schedulable=False, drained=True)

    why = decide([gpu_node("a", 8), drained], [gang(1, 2)]).pending[1]

    assert why.code is Reason.NO_NODE_BIG_ENOUGH, why.message


def test_tasks_that_may_share_a_node_still_count_by_gpus() -> None:
    shared = replace(pending(1, gpus=1, tasks=2), distinct_nodes=False)

    assert decide([gpu_node("a", 8)], [shared]).placements != []
