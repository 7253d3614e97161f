"""A job over several nodes: every task on a node of its own, all on nodes of one fabric
group unless the job allows crossing groups; all its tasks or none."""

from __future__ import annotations

from dataclasses import replace

from tests.support.scheduling import decide, gpu_node, pending


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
