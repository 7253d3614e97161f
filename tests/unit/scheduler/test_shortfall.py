"""Why a demand does not fit a capacity (``shortfall``): the first resource short and the
best figure of it, for whole GPUs, fractions and the host's CPUs and memory, found by a
``ShortfallFinder`` over a real free capacity; and the nodes by CPUs and memory
(``HostFrontier``) that the host check bisects."""

from __future__ import annotations

import pytest

from gpupool.domain.jobs import Reason
from gpupool.domain.units import GiB
from gpupool.scheduler.capacity import build_capacity
from gpupool.scheduler.shortfall import HostFrontier, Shortfall, ShortfallFinder
from gpupool.scheduler.types import NodeCapacity
from tests.support.scheduling import allocation, demand, node, shortfall_of


def frontier(*nodes: NodeCapacity) -> HostFrontier:
    return HostFrontier(build_capacity(nodes, ()).nodes)


# -- whole GPUs ----------------------------------------------------------------------------------


def test_a_demand_that_fits_has_no_shortfall():
    nodes = [node("node-a").gpus(2).cpus(8).build()]

    assert shortfall_of(demand(2, cpus=8.0), nodes) is None
    assert shortfall_of(demand(0.5), nodes) is None
    assert shortfall_of(demand(cpus=8.0, memory=512 * GiB), nodes) is None


def test_whole_gpus_short_give_the_largest_free_block_on_the_first_node_by_name():
    nodes = [node("node-b").gpus(2).build(), node("node-a").gpus(4).build()]
    held = allocation(10, "node-a", (0, 1.0, 80 * GiB), (1, 1.0, 80 * GiB))

    assert shortfall_of(demand(3), nodes, [held]) == Shortfall(
        Reason.INSUFFICIENT_GPUS, "node-a", count=2
    )


def test_whole_gpus_with_a_memory_floor_count_only_the_free_gpus_that_large():
    nodes = [node("node-a").gpus(4, memory=40 * GiB).build(), node("node-b").gpus(2).build()]
    held = allocation(10, "node-b", (0, 1.0, 80 * GiB))

    assert shortfall_of(demand(2, gpu_memory=80 * GiB), nodes, [held]) == Shortfall(
        Reason.INSUFFICIENT_GPUS, "node-b", count=1
    )


def test_whole_gpus_with_none_free_name_no_node():
    nodes = [node("node-a").gpus(1).build()]
    held = allocation(10, "node-a", (0, 1.0, 80 * GiB))

    assert shortfall_of(demand(1), nodes, [held]) == Shortfall(Reason.INSUFFICIENT_GPUS)


# -- fractions -----------------------------------------------------------------------------------


def test_a_fraction_short_of_share_gives_the_gpu_with_the_most_free_share():
    nodes = [node("node-a").gpus(2, memory=40 * GiB).build()]
    held = [
        allocation(10, "node-a", (0, 0.75, 10 * GiB)),
        allocation(11, "node-a", (1, 0.6, 30 * GiB)),
    ]

    found = shortfall_of(demand(0.5), nodes, held)

    assert found is not None
    assert (found.code, found.node, found.memory) == (Reason.INSUFFICIENT_GPUS, "node-a", 10 * GiB)
    assert found.share == pytest.approx(0.4)


def test_a_fraction_short_of_memory_gives_the_most_free_memory_where_its_share_fits():
    """GPU 1 has more memory free (35 GiB) but too little share (0.5) for the 0.75 that 30 GiB
    of a 40 GiB GPU takes: GPU 0's 20 GiB is the figure."""
    nodes = [node("node-a").gpus(2, memory=40 * GiB).build()]
    held = [
        allocation(10, "node-a", (0, 0.1, 20 * GiB)),
        allocation(11, "node-a", (1, 0.5, 5 * GiB)),
    ]

    found = shortfall_of(demand(gpu_memory=30 * GiB), nodes, held)

    assert found is not None
    assert (found.code, found.node, found.memory) == (
        Reason.INSUFFICIENT_GPU_MEMORY,
        "node-a",
        20 * GiB,
    )
    assert found.share == pytest.approx(0.9)


def test_a_fraction_on_gpus_held_whole_or_on_no_gpu_at_all():
    held_whole = [node("node-a").gpus(1).build()]
    held = allocation(10, "node-a", (0, 1.0, 80 * GiB))

    assert shortfall_of(demand(0.5), held_whole, [held]) == Shortfall(
        Reason.INSUFFICIENT_GPUS, "node-a", share=0.0, memory=0
    )
    assert shortfall_of(demand(0.5), [node("node-a").build()]) == Shortfall(
        Reason.INSUFFICIENT_GPUS
    )


# -- the host's CPUs and memory --------------------------------------------------------------------


def test_cpus_short_are_judged_on_the_nodes_that_fit_the_gpu_part_only():
    nodes = [node("node-a").gpus(8).cpus(8).build(), node("node-b").cpus(64).build()]

    assert shortfall_of(demand(1, cpus=16.0), nodes) == Shortfall(
        Reason.INSUFFICIENT_CPU, "node-a", cpus=8.0
    )
    assert shortfall_of(demand(cpus=16.0), nodes) is None  # node-b, without a GPU


def test_memory_short_gives_the_most_free_among_the_nodes_with_enough_cpus():
    nodes = [
        node("node-a").cpus(64).memory(64 * GiB).build(),
        node("node-b").cpus(8).memory(256 * GiB).build(),
        node("node-c").cpus(2).memory(1024 * GiB).build(),  # too few CPUs
    ]

    assert shortfall_of(demand(cpus=4.0, memory=512 * GiB), nodes) == Shortfall(
        Reason.INSUFFICIENT_MEMORY, "node-b", memory=256 * GiB
    )
    assert shortfall_of(demand(cpus=128.0, memory=512 * GiB), nodes) == Shortfall(
        Reason.INSUFFICIENT_CPU, "node-a", cpus=64.0
    )


def test_host_figures_are_what_the_allocations_leave_free():
    nodes = [node("node-a").gpus(2).cpus(8).memory(64 * GiB).build()]
    held = allocation(10, "node-a", (0, 1.0, 80 * GiB), cpus=6.0, memory=60 * GiB)

    assert shortfall_of(demand(1, cpus=4.0), nodes, [held]) == Shortfall(
        Reason.INSUFFICIENT_CPU, "node-a", cpus=2.0
    )
    assert shortfall_of(demand(1, cpus=2.0, memory=8 * GiB), nodes, [held]) == Shortfall(
        Reason.INSUFFICIENT_MEMORY, "node-a", memory=4 * GiB
    )


def test_demands_of_one_gpu_shape_each_get_their_own_host_answer():
    finder = ShortfallFinder(build_capacity([node("node-a").gpus(2).cpus(8).build()], ()))

    assert finder.find(demand(1, cpus=4.0)) is None
    assert finder.find(demand(1, cpus=16.0)) == Shortfall(
        Reason.INSUFFICIENT_CPU, "node-a", cpus=8.0
    )
    assert finder.find(demand(1, cpus=4.0, memory=1024 * GiB)) == Shortfall(
        Reason.INSUFFICIENT_MEMORY, "node-a", memory=512 * GiB
    )
    assert finder.find(demand(1, cpus=4.0)) is None


# -- the host frontier -----------------------------------------------------------------------------


def test_the_frontier_names_the_node_with_the_most_cpus_the_first_by_name_of_equals():
    nodes = frontier(
        node("node-b").cpus(8).memory(128 * GiB).build(),
        node("node-a").cpus(8).memory(64 * GiB).build(),
    )

    assert nodes.shortfall(16.0, 0) == Shortfall(Reason.INSUFFICIENT_CPU, "node-a", cpus=8.0)
    assert nodes.shortfall(8.0 + 1e-10, 0) is None  # CPUs compared as floats


def test_the_frontier_gives_the_most_memory_among_the_nodes_with_enough_cpus():
    nodes = frontier(
        node("node-a").cpus(16).memory(32 * GiB).build(),
        node("node-b").cpus(8).memory(256 * GiB).build(),
        node("node-c").cpus(4).memory(512 * GiB).build(),
    )

    assert nodes.shortfall(12.0, 64 * GiB) == Shortfall(
        Reason.INSUFFICIENT_MEMORY, "node-a", memory=32 * GiB
    )
    assert nodes.shortfall(8.0, 300 * GiB) == Shortfall(
        Reason.INSUFFICIENT_MEMORY, "node-b", memory=256 * GiB
    )
    assert nodes.shortfall(4.0, 600 * GiB) == Shortfall(
        Reason.INSUFFICIENT_MEMORY, "node-c", memory=512 * GiB
    )
    assert nodes.shortfall(4.0, 512 * GiB) is None


def test_the_frontier_names_the_first_by_name_of_nodes_with_as_much_memory():
    nodes = frontier(
        node("node-b").cpus(8).memory(64 * GiB).build(),
        node("node-a").cpus(4).memory(64 * GiB).build(),
    )

    assert nodes.shortfall(1.0, 128 * GiB) == Shortfall(
        Reason.INSUFFICIENT_MEMORY, "node-a", memory=64 * GiB
    )
