"""Why a job over several nodes waits when the pool can never hold it: one task per node, so
a pool of fewer schedulable nodes than tasks (one machine, or the others drained) says
NoNodeBigEnough, never that the GPUs are reserved for jobs waiting longer."""

from __future__ import annotations

from dataclasses import replace

from tests.support.scheduling import decide, gpu_node, pending

from gpupool.domain.jobs import Reason


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
