"""Messages for people (``messages``): what a request needs and the most there is, with real
figures, against the free capacity (``waiting_message``) and against empty nodes
(``size_message``), and why no node takes new work (``no_nodes_message``)."""

from __future__ import annotations

from gpupool.domain.units import GiB
from gpupool.scheduler.fit import Demand
from gpupool.scheduler.messages import (
    CPU_HINT,
    MEMORY_HINT,
    NO_NODES_MESSAGE,
    cpu_need,
    format_cpus,
    format_share,
    gpu_need,
    no_nodes_message,
    plural,
    size_message,
    waiting_message,
)
from gpupool.scheduler.types import Allocation, NodeCapacity
from tests.support.scheduling import (
    allocation,
    decide,
    demand,
    down,
    drained,
    node,
    pending,
    shortfall_of,
)


def waiting(wanted: Demand, nodes: list[NodeCapacity], *held: Allocation) -> str:
    """Why ``wanted`` waits on ``nodes`` with ``held`` running."""
    found = shortfall_of(wanted, nodes, held)
    assert found is not None, "it fits"
    return waiting_message(wanted, found)


def never(wanted: Demand, nodes: list[NodeCapacity]) -> str:
    """Why ``wanted`` fits none of ``nodes`` even empty."""
    found = shortfall_of(wanted, nodes)
    assert found is not None, "it fits"
    return size_message(wanted, found)


# -- words and figures -----------------------------------------------------------------------------


def test_one_of_a_thing_is_singular_and_any_other_count_plural():
    assert plural(1, "GPU") == "GPU"
    assert plural(1.0, "CPU") == "CPU"
    assert [plural(count, "GPU") for count in (0, 2, 0.5)] == ["GPUs"] * 3


def test_shares_show_three_decimals_and_cpus_two_without_trailing_zeros():
    assert [format_share(share) for share in (0.5, 1 / 3, 1.0, 0.0004)] == [
        "0.5",
        "0.333",
        "1",
        "0",
    ]
    assert [format_cpus(cpus) for cpus in (1.0, 0.25, 1 / 3, 12.5)] == ["1", "0.25", "0.33", "12.5"]


def test_the_gpu_part_of_a_request_in_words():
    assert gpu_need(demand(4, gpu_memory=40 * GiB)) == "4 GPUs with at least 40 GiB each"
    assert gpu_need(demand(1, gpu_memory=40 * GiB)) == "1 GPU with at least 40 GiB"
    assert gpu_need(demand(2)) == "2 GPUs"
    assert gpu_need(demand(0.5)) == "0.5 of a GPU"
    assert gpu_need(demand(0.25, gpu_memory=10 * GiB)) == "0.25 of a GPU with 10 GiB free"
    assert gpu_need(demand(gpu_memory=20 * GiB)) == "20 GiB of GPU memory"


def test_the_cpu_part_of_a_request_in_words():
    assert cpu_need(demand(cpus=1.0)) == "1 CPU"
    assert cpu_need(demand(cpus=0.25)) == "0.25 CPUs"
    assert cpu_need(demand(cpus=16.0)) == "16 CPUs"


# -- why no node takes new work --------------------------------------------------------------------


def test_a_pool_without_nodes_says_only_that():
    assert no_nodes_message([]) == NO_NODES_MESSAGE == "there are no schedulable nodes in the pool"


def test_drained_nodes_are_named_in_order_whatever_the_pools_order():
    assert no_nodes_message([drained("node-b"), drained("node-a")]) == (
        f"{NO_NODES_MESSAGE}: every node is drained (node-a, node-b); it waits until an admin "
        "undrains one (gpupool node undrain NAME)"
    )


def test_drained_and_down_nodes_are_counted_apart_with_what_ends_the_wait():
    nodes = [down("node-c"), drained("node-a"), down("node-b")]

    assert no_nodes_message(nodes) == (
        f"{NO_NODES_MESSAGE}: 1 drained (node-a) and 2 down (node-b, node-c); it waits until an "
        "admin undrains one (gpupool node undrain NAME) or one is up"
    )


def test_three_names_are_shown_and_the_others_counted():
    three = [down(f"node-{i}") for i in range(3)]

    assert no_nodes_message(three) == (
        f"{NO_NODES_MESSAGE}: every node is down (node-0, node-1, node-2); it waits until one is up"
    )
    assert no_nodes_message([*three, down("node-3")]) == (
        f"{NO_NODES_MESSAGE}: every node is down (node-0, node-1, node-2 and 1 more); it waits "
        "until one is up"
    )


def test_a_job_waiting_because_every_node_is_drained_is_told_so_and_what_ends_it() -> None:
    decisions = decide([drained("node-a"), drained("node-b", 2)], [pending(1)])

    (reason,) = decisions.pending.values()
    assert reason.code.value == "NoNodes"
    assert reason.message == (
        "there are no schedulable nodes in the pool: every node is drained (node-a, node-b); "
        "it waits until an admin undrains one (gpupool node undrain NAME)"
    )


def test_every_node_down_names_a_few_of_them() -> None:
    decisions = decide([down(f"node-{i}") for i in range(5)], [pending(1)])

    assert decisions.pending[1].message == (
        "there are no schedulable nodes in the pool: every node is down (node-0, node-1, node-2 "
        "and 2 more); it waits until one is up"
    )


# -- why a request waits for the free capacity -------------------------------------------------


def test_whole_gpus_wait_for_the_largest_free_block_on_the_earliest_node():
    nodes = [node("node-a").gpus(4).build(), node("node-b").gpus(2).build()]
    held = [
        allocation(10, "node-a", (0, 1.0, 80 * GiB), (1, 1.0, 80 * GiB)),
        allocation(11, "node-b", (0, 1.0, 80 * GiB)),
    ]

    assert waiting(demand(4), nodes, *held) == (
        "needs 4 GPUs on one node; the largest free block is 2 on node-a"
    )


def test_whole_gpus_with_no_gpu_free_say_so_with_their_memory_floor():
    nodes = [node("node-a").gpus(1).build()]
    held = allocation(10, "node-a", (0, 1.0, 80 * GiB))

    assert waiting(demand(1), nodes, held) == (
        "needs 1 GPU on one node; no GPU is free on any node"
    )
    assert waiting(demand(1, gpu_memory=40 * GiB), nodes, held) == (
        "needs 1 GPU with at least 40 GiB on one node; no GPU with at least 40 GiB is free on any "
        "node"
    )


def test_a_fraction_waits_for_the_gpu_with_the_most_room():
    nodes = [node("node-a").gpus(2, memory=40 * GiB).build()]
    held = [
        allocation(10, "node-a", (0, 0.75, 10 * GiB)),
        allocation(11, "node-a", (1, 0.6, 30 * GiB)),
    ]

    assert waiting(demand(0.5), nodes, *held) == (
        "needs 0.5 of a GPU; the most free on any GPU is 0.4 with 10 GiB on node-a"
    )


def test_gpu_memory_alone_waits_for_the_gpu_with_the_most_free_memory():
    nodes = [node("node-a").gpus(1, memory=40 * GiB).build()]
    held = allocation(10, "node-a", (0, 0.1, 20 * GiB))

    assert waiting(demand(gpu_memory=30 * GiB), nodes, held) == (
        "needs 30 GiB of GPU memory; the most free on any GPU is 0.9 with 20 GiB on node-a"
    )


def test_a_fraction_where_every_gpu_is_held_whole_or_there_is_none():
    held_whole = [node("node-a").gpus(1).build()]

    assert waiting(demand(0.5), held_whole, allocation(10, "node-a", (0, 1.0, 80 * GiB))) == (
        "needs 0.5 of a GPU; every GPU is fully used"
    )
    assert waiting(demand(0.5), [node("node-a").build()]) == (
        "needs 0.5 of a GPU; the pool has no GPUs"
    )


def test_cpus_wait_for_the_node_with_the_most_free_among_those_with_room_for_the_gpus():
    nodes = [node("node-a").gpus(2).cpus(8).build(), node("node-b").cpus(64).build()]
    held = allocation(10, "node-a", (0, 1.0, 80 * GiB), cpus=6.0)

    assert waiting(demand(1, cpus=4.0), nodes, held) == (
        f"needs 4 CPUs; the most free on a node with room for its GPUs is 2 on node-a; {CPU_HINT}"
    )


def test_cpus_alone_wait_for_the_node_with_the_most_free():
    nodes = [node("node-a").cpus(4).build()]

    assert waiting(demand(cpus=2.0), nodes, allocation(10, "node-a", cpus=2.5)) == (
        f"needs 2 CPUs; the most free on a node is 1.5 on node-a; {CPU_HINT}"
    )


def test_memory_waits_for_the_node_with_the_most_free_among_those_with_room_for_the_rest():
    nodes = [node("node-a").gpus(1).memory(64 * GiB).build()]
    held = allocation(10, "node-a", memory=48 * GiB)

    assert waiting(demand(cpus=1.0, memory=32 * GiB), nodes, held) == (
        "needs 32 GiB of memory; the most free on a node with room for its CPUs is 16 GiB on "
        f"node-a; {MEMORY_HINT}"
    )
    assert waiting(demand(1, memory=32 * GiB), nodes, held) == (
        "needs 32 GiB of memory; the most free on a node with room for its GPUs and CPUs is "
        f"16 GiB on node-a; {MEMORY_HINT}"
    )


# -- why a request never fits ----------------------------------------------------------------------


def test_whole_gpus_never_fit_more_than_the_largest_node_has():
    nodes = [node("node-a").gpus(8).build(), node("node-b").gpus(4).build()]

    assert never(demand(16), nodes) == (
        "needs 16 GPUs on one node; the largest node has 8 GPUs (node-a)"
    )


def test_whole_gpus_with_a_memory_floor_count_only_the_gpus_that_large():
    nodes = [node("node-a").gpus(2, memory=40 * GiB).build(), node("node-b").gpus(1).build()]

    assert never(demand(2, gpu_memory=80 * GiB), nodes) == (
        "needs 2 GPUs with at least 80 GiB each on one node; the largest node has 1 GPU with at "
        "least 80 GiB (node-b)"
    )
    small = [node("node-a").gpus(2, memory=40 * GiB).build()]
    assert never(demand(1, gpu_memory=80 * GiB), small) == (
        "needs 1 GPU with at least 80 GiB on one node; no node has a GPU with at least 80 GiB"
    )


def test_gpus_never_fit_a_pool_without_any():
    nodes = [node("node-a").build()]

    assert never(demand(1), nodes) == "needs 1 GPU on one node; no node has a GPU"
    assert never(demand(0.5), nodes) == "needs 0.5 of a GPU; no node has GPUs"


def test_a_fraction_never_fits_more_memory_than_the_largest_gpu_has():
    nodes = [node("node-a").gpus(2, memory=40 * GiB).build(), node("node-b").gpus(1).build()]

    assert never(demand(0.5, gpu_memory=100 * GiB), nodes) == (
        "needs 0.5 of a GPU with 100 GiB free; the largest GPU has 80 GiB (node-b)"
    )


def test_cpus_and_memory_never_fit_more_than_the_largest_node_with_room_for_the_rest():
    nodes = [
        node("node-a").gpus(1).cpus(8).build(),
        node("node-b").cpus(32).memory(1024 * GiB).build(),
    ]

    assert never(demand(1, cpus=16.0), nodes) == (
        "needs 16 CPUs on one node; the largest node with room for its GPUs has 8 CPUs (node-a); "
        f"{CPU_HINT}"
    )
    assert never(demand(cpus=64.0), nodes) == (
        f"needs 64 CPUs on one node; the largest node has 32 CPUs (node-b); {CPU_HINT}"
    )
    assert never(demand(cpus=4.0, memory=2048 * GiB), nodes) == (
        "needs 2 TiB of memory on one node; the largest node with room for its CPUs has 1 TiB "
        f"(node-b); {MEMORY_HINT}"
    )
