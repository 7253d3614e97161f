"""A node that is not schedulable (drained, down or removed: services.nodes.settle) gets no
new work, by placement or by preemption; what runs there stays."""

from __future__ import annotations

from dataclasses import replace

from tests.support.scheduling import codes, decide, gpu_node, pending, placed_ids, running, victims

LEVEL_2 = 40_000.0  # GPU-seconds: a job of this much service yields to a new one of its team


def drained(name: str, gpus: int = 1):  # noqa: ANN201 - a NodeCapacity
    return replace(gpu_node(name, gpus), schedulable=False, drained=True)


def down(name: str, gpus: int = 1):  # noqa: ANN201 - a NodeCapacity
    return replace(gpu_node(name, gpus), schedulable=False)


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


def test_a_job_waiting_because_every_node_is_drained_is_told_so_and_what_ends_it() -> None:
    decisions = decide([drained("node-a"), drained("node-b", 2)], [pending(1)])

    (reason,) = decisions.pending.values()
    assert reason.code.value == "NoNodes"
    assert reason.message == (
        "there are no schedulable nodes in the pool: every node is drained (node-a, node-b); "
        "it waits until an admin undrains one (gpupool node undrain NAME)"
    )


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


def test_every_node_down_names_a_few_of_them() -> None:
    decisions = decide([down(f"node-{i}") for i in range(5)], [pending(1)])

    assert decisions.pending[1].message == (
        "there are no schedulable nodes in the pool: every node is down (node-0, node-1, node-2 "
        "and 2 more); it waits until one is up"
    )
