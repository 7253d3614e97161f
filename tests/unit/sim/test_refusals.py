"""Whether a pool could ever run a job (``sim.refusals``): a task no node could hold is the
scheduler's own reason, and a gang is refused when the empty pool cannot hold all its tasks at
once, counting each node's GPUs (of the job's types, with enough memory), CPUs and memory."""

from __future__ import annotations

import pytest

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.units import GiB
from gpupool.scheduler import infeasible_reason
from gpupool.sim import refusals
from gpupool.sim.refusals import RefusalCache, gang_reason
from tests.support.scheduling import node

TWO_NODES = [node("n1").gpus(4).build(), node("n2").gpus(4).build()]


def test_a_task_no_node_holds_gets_the_schedulers_reason() -> None:
    request = ResourceRequest(gpus=8)
    reason = RefusalCache(TWO_NODES).reason(request)
    assert reason is not None and reason == infeasible_reason(request, TWO_NODES)


def test_a_gang_the_empty_pool_cannot_hold_at_once_is_refused_with_the_figures() -> None:
    reason = RefusalCache(TWO_NODES).reason(ResourceRequest(gpus=4), tasks=3)
    assert reason == (
        "a gang of 3 tasks of 4 GPUs each (12 GPUs) can never start: the pool holds at most "
        "2 such tasks at once (8 GPUs on 2 nodes)"
    )


def test_a_gang_that_fits_whole_is_not_refused() -> None:
    assert RefusalCache(TWO_NODES).reason(ResourceRequest(gpus=2), tasks=4) is None


def test_a_gang_of_one_gpu_tasks_is_said_in_the_singular() -> None:
    reason = gang_reason(ResourceRequest(gpus=1), 9, TWO_NODES)
    assert reason is not None and reason.startswith("a gang of 9 tasks of 1 GPU each (9 GPUs)")


def test_gpus_left_over_on_each_node_do_not_add_up_to_a_task() -> None:
    # 3 GPUs on each node: one 2-GPU task each, the third GPUs of both are no task
    nodes = [node("n1").gpus(3).build(), node("n2").gpus(3).build()]
    assert gang_reason(ResourceRequest(gpus=2), 2, nodes) is None
    assert gang_reason(ResourceRequest(gpus=2), 3, nodes) is not None


@pytest.mark.parametrize(
    ("request_", "held"),
    [
        (ResourceRequest(gpus=1, cpus=40), 1),  # 64 CPUs: one such task per node
        (ResourceRequest(gpus=1, memory_bytes=300 * GiB), 1),  # 512 GiB: one per node
        (ResourceRequest(gpus=1, gpu_memory_bytes=60 * GiB), 2),  # only the 80 GiB GPUs
    ],
)
def test_a_nodes_cpus_memory_and_gpu_memory_bound_its_tasks(
    request_: ResourceRequest, held: int
) -> None:
    mixed = node("n1").gpus(2, 80 * GiB).gpus(2, 40 * GiB).build()
    assert gang_reason(request_, held, [mixed]) is None
    assert gang_reason(request_, held + 1, [mixed]) is not None


def test_only_gpus_of_the_jobs_types_count() -> None:
    nodes = [node("n1").gpus(4, model="A100").build(), node("n2").gpus(4, model="H100").build()]
    request = ResourceRequest(gpus=4)
    assert gang_reason(request, 2, nodes) is None
    assert gang_reason(request, 2, nodes, gpu_types=("a100",)) is not None
    assert RefusalCache(nodes).reason(request, ("a100",), tasks=1) is None


def test_a_gang_of_fractions_or_without_gpus_is_left_to_the_engine() -> None:
    assert gang_reason(ResourceRequest(gpus=0.5), 99, TWO_NODES) is None
    assert gang_reason(ResourceRequest(), 99, TWO_NODES) is None


def test_each_job_shape_is_judged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[ResourceRequest] = []

    def counting(request, nodes, gpu_types=()):  # noqa: ANN001, ANN202
        asked.append(request)
        return infeasible_reason(request, nodes, gpu_types)

    monkeypatch.setattr(refusals, "infeasible_reason", counting)
    cache = RefusalCache(TWO_NODES)
    for _ in range(3):
        assert cache.reason(ResourceRequest(gpus=4), tasks=3) is not None
        assert cache.reason(ResourceRequest(gpus=4), tasks=2) is None
    assert cache.reason(ResourceRequest(gpus=4), ("H100",), tasks=2) is None
    assert len(asked) == 3, "one judgement per (request, types, tasks)"
