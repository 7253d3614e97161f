"""Where tasks go (``placement``): gangs, jobs over several nodes, GPU types and connectivity
domains."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.jobs import Reason
from gpupool.scheduler.types import Decisions
from gpupool.sim.engine import cluster, simulate
from tests.support.scheduling import (
    A100,
    H100,
    codes,
    decide,
    gpu_node,
    gpu_uuid,
    pending,
    placed_ids,
    quota,
    running,
    victims,
)
from tests.support.traces import job as trace_job


def gpus_of(decisions: Decisions) -> dict[tuple[int, int], tuple[str, list[str]]]:
    """(job, task) -> (node, GPU uuids)."""
    return {
        (p.job_id, p.task): (p.node, [part.uuid for part in p.gpus]) for p in decisions.placements
    }


# -- gangs -----------------------------------------------------------------------------------


def test_a_gang_of_three_2_gpu_tasks_spans_two_4_gpu_nodes():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3)])

    placed = gpus_of(decisions)
    assert sorted(placed) == [(1, 0), (1, 1), (1, 2)]
    assert {node for node, _ in placed.values()} == {"node-a", "node-b"}
    uuids = [uuid for _, gpus in placed.values() for uuid in gpus]
    assert len(uuids) == len(set(uuids)) == 6
    assert all(len(gpus) == 2 for _, gpus in placed.values())
    assert decisions.pending == {}


def test_a_gang_that_does_not_fit_whole_starts_no_task():
    # one GPU busy on each node: each node has room for one task of 2, the gang needs 3
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [
        running(100, "node-a", [0], preemptible=False),
        running(101, "node-b", [0], preemptible=False),
    ]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3), pending(2, gpus=1)], held)

    assert placed_ids(decisions) == {2}
    reason = decisions.pending[1]
    assert reason.position == 1
    assert "gang: all 3 tasks must start together" in reason.blockers
    # the capacity the gang tried and gave back is there for the job behind it
    assert len(decisions.placements) == 1


def test_a_gang_uses_a_third_node_when_two_are_not_enough():
    # each node holds one task of 3 GPUs
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4), gpu_node("node-c", 4)]
    held = [running(100, "node-a", [0], preemptible=False), running(101, "node-b", [0])]

    decisions = decide(nodes, [pending(1, gpus=3, tasks=3)], held)

    assert {node for node, _ in gpus_of(decisions).values()} == {"node-a", "node-b", "node-c"}


def test_a_gang_reclaims_whole_spots_for_all_its_tasks():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [running(100 + i, "node-a", [i]) for i in range(4)]
    held += [running(110 + i, "node-b", [i]) for i in range(4)]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3)], held, [quota("a", 6)])

    # node-a frees two spots of 2, node-b one
    assert sorted(victims(decisions)) == [100, 101, 102, 103, 110, 111]
    assert set(victims(decisions).values()) == {1}
    assert codes(decisions) == {1: "Preempting"}


def test_a_gang_that_does_not_fit_says_what_it_lacks():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [
        running(100, "node-a", [0], preemptible=False),
        running(101, "node-b", [0], preemptible=False),
    ]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3)], held)

    reason = decisions.pending[1]
    assert reason.code is not Reason.QUEUED
    assert "was not placed in this cycle" not in reason.message


def test_a_gang_larger_than_the_pool_is_refused_at_submit():
    # 4 GPUs on one 2-GPU node become a gang of two 2-GPU tasks, which one node cannot hold
    trace = [trace_job(1, 0.0, 5.0, 4)]

    result = simulate(trace, cluster("1x2"))

    [refused] = result.unscheduled
    assert "was not placed in this cycle" not in refused.reason


# -- GPU types -------------------------------------------------------------------------------


TYPED_POOL = [gpu_node("node-a", 2, A100), gpu_node("node-b", 2, H100)]


def test_a_job_runs_on_a_gpu_of_its_type_matched_case_insensitively_in_part():
    decisions = decide(
        TYPED_POOL, [pending(1, gpu_types=("a100",)), pending(2, gpu_types=("H100",))]
    )

    assert gpus_of(decisions) == {
        (1, 0): ("node-a", [gpu_uuid("node-a", 0)]),
        (2, 0): ("node-b", [gpu_uuid("node-b", 0)]),
    }


def test_any_of_several_types_will_do():
    held = [running(100, "node-a", [0, 1], preemptible=False)]

    decisions = decide(TYPED_POOL, [pending(1, gpus=2, gpu_types=("v100", "h100"))], held)

    assert gpus_of(decisions) == {(1, 0): ("node-b", [gpu_uuid("node-b", i) for i in (0, 1)])}


def test_a_type_the_pool_lacks_is_no_gpu_of_type():
    decisions = decide(TYPED_POOL, [pending(1, gpu_types=("V100",))])

    reason = decisions.pending[1]
    assert reason.code is Reason.NO_GPU_OF_TYPE
    assert reason.message == (f"no GPU in the pool is of type V100 (models here: {A100}, {H100})")
    assert reason.blockers == ("GPU type: only V100",)


def test_a_type_the_pool_has_but_is_busy_waits_for_gpus():
    held = [running(100, "node-b", [0, 1], preemptible=False)]

    decisions = decide(TYPED_POOL, [pending(1, gpu_types=("h100",))], held)

    assert codes(decisions) == {1: "InsufficientGpus"}


def test_a_typed_job_takes_victims_only_on_gpus_of_its_type():
    held = [
        running(100 + i, node, [i % 2]) for i, node in enumerate(["node-a"] * 2 + ["node-b"] * 2)
    ]

    for types, victim in ((("h100",), {102, 103}), (("a100",), {100, 101})):
        decisions = decide(TYPED_POOL, [pending(1, gpu_types=types)], held, [quota("a", 2)])

        assert len(decisions.preemptions) == 1
        assert set(victims(decisions)) <= victim


def test_a_gang_of_one_type_uses_only_those_nodes():
    nodes = [gpu_node("node-a", 4, A100), gpu_node("node-b", 4, H100), gpu_node("node-c", 4, A100)]

    decisions = decide(nodes, [pending(1, gpus=4, tasks=2, gpu_types=("a100",))])

    assert sorted(node for node, _ in gpus_of(decisions).values()) == ["node-a", "node-c"]


# -- connectivity domains ----------------------------------------------------------------------


def domain_pool(domains, busy=(0, 1)):
    nodes = [gpu_node("node-a", len(domains), domains=domains)]
    return nodes, [running(100, "node-a", list(busy), preemptible=False)]


@pytest.mark.parametrize(
    ("gpus", "chosen"),
    [
        (2, [2, 3]),  # domain 0 has exactly 2 free: the best fit
        (3, [4, 5, 6]),  # only domain 1 has 3
        (4, [4, 5, 6, 7]),
        (5, [2, 4, 5, 6, 7]),  # no domain has 5: the fewest domains, the largest first
    ],
)
def test_a_multi_gpu_task_gets_gpus_of_one_domain_when_one_has_enough(gpus, chosen):
    nodes, held = domain_pool([0, 0, 0, 0, 1, 1, 1, 1])

    decisions = decide(nodes, [pending(1, gpus=gpus)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", i) for i in chosen]


def test_the_smallest_domain_that_suffices_is_used():
    nodes, held = domain_pool([0, 0, 1, 1, 1, 1, 2, 2], busy=(0,))

    decisions = decide(nodes, [pending(1, gpus=2)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", 6), gpu_uuid("node-a", 7)]


@pytest.mark.parametrize("gpus", [1, 0.5])
def test_one_gpu_goes_to_the_fullest_domain(gpus):
    # domain 0 has 4 free GPUs, domain 1 one: a 1-GPU task (or a fraction) takes that one
    nodes, held = domain_pool([0, 0, 0, 0, 1, 1, 1, 1], busy=(4, 5, 6))

    decisions = decide(nodes, [pending(1, gpus=gpus)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", 7)]


def test_domains_keep_large_blocks_for_large_jobs():
    nodes, held = domain_pool([0, 0, 0, 0, 1, 1, 1, 1], busy=(0, 1))

    decisions = decide(nodes, [pending(1, gpus=2), pending(2, gpus=4)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", 2), gpu_uuid("node-a", 3)]
    assert gpus_of(decisions)[(2, 0)][1] == [gpu_uuid("node-a", i) for i in (4, 5, 6, 7)]


# -- jobs over several nodes -----------------------------------------------------------------------


# A job over several nodes: every task on a node of its own, all on nodes of one fabric
# group unless the job allows crossing groups; all its tasks or none.


def in_group(name: str, group: str | None, gpus: int = 2):  # noqa: ANN201 - a NodeCapacity
    return replace(gpu_node(name, gpus), fabric_group=group)


def gang(job_id: int, tasks: int, gpus: float = 2, cross: bool = False):  # noqa: ANN201
    return replace(
        pending(job_id, gpus=gpus, tasks=tasks),
        distinct_nodes=True,
        one_fabric=not cross,
    )


def test_each_task_of_a_gang_gets_a_node_of_its_own() -> None:
    nodes = [in_group("a", None, gpus=8), in_group("b", None), in_group("c", None)]

    decisions = decide(nodes, [gang(1, 3)])

    assert sorted(p.node for p in decisions.placements) == ["a", "b", "c"]


def test_a_gang_waits_rather_than_doubling_up_on_a_node() -> None:
    decisions = decide([in_group("a", None, gpus=8), in_group("b", None)], [gang(1, 3)])

    assert decisions.placements == []
    assert 1 in decisions.pending


def test_a_gang_keeps_to_one_fabric_group() -> None:
    nodes = [in_group("a", "ib-1"), in_group("b", "ib-2"), in_group("c", "ib-2")]

    decisions = decide(nodes, [gang(1, 2)])

    assert sorted(p.node for p in decisions.placements) == ["b", "c"]


def test_a_gang_that_fits_only_across_groups_waits_unless_it_allows_it() -> None:
    nodes = [in_group("a", "ib-1"), in_group("b", "ib-2")]

    assert decide(nodes, [gang(1, 2)]).placements == []
    crossing = decide(nodes, [gang(1, 2, cross=True)])
    assert sorted(p.node for p in crossing.placements) == ["a", "b"]
