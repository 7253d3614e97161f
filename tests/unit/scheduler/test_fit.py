"""Whether a demand fits a GPU or a node (``fit``): a request as numbers (``Demand``), the
share a fraction takes of a GPU, the free GPUs a whole-GPU demand may take, where a job may
go (``Where``) and whether a demand fits what a node has free (``fits_free``)."""

from __future__ import annotations

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.units import GiB
from gpupool.scheduler.capacity import GpuState, NodeState, build_capacity
from gpupool.scheduler.fit import (
    Demand,
    DemandCache,
    Where,
    demand_of,
    fits_free,
    fraction_demand,
    fraction_fits,
    least_fraction_share,
    share_fits,
    whole_gpus_on,
)
from gpupool.scheduler.types import SHARE_EPSILON, Allocation, NodeCapacity
from tests.support.scheduling import A100, H100, allocation, demand, node

A100_40 = "NVIDIA A100-SXM4-40GB"


def free(capacity_of: NodeCapacity, *held: Allocation) -> NodeState:
    """What ``capacity_of`` has free with ``held`` on it, as placement sees it."""
    return build_capacity([capacity_of], held).by_name[capacity_of.name]


# -- a request as numbers ----------------------------------------------------------------------


def test_a_demand_of_whole_gpus_counts_them_and_is_no_fraction():
    two = Demand(2.0, None, 1.0, 0)

    assert (two.whole, two.fractional, two.uses_gpus) == (2, False, True)


def test_a_share_of_a_gpu_or_gpu_memory_alone_is_a_fraction_of_no_whole_gpu():
    half = Demand(0.5, None, 1.0, 0)
    memory_only = Demand(0.0, 20 * GiB, 1.0, 0)

    assert (half.whole, half.fractional, half.uses_gpus) == (0, True, True)
    assert (memory_only.whole, memory_only.fractional, memory_only.uses_gpus) == (0, True, True)


def test_a_demand_without_gpus_or_gpu_memory_uses_no_gpu():
    cpus_only = Demand(0.0, None, 4.0, 8 * GiB)

    assert (cpus_only.whole, cpus_only.fractional, cpus_only.uses_gpus) == (0, False, False)


def test_whole_gpus_with_a_memory_floor_are_still_whole_not_a_fraction():
    floor = Demand(1.0, 40 * GiB, 1.0, 0)

    assert (floor.whole, floor.fractional) == (1, False)


def test_a_request_becomes_its_numbers_with_none_as_zero():
    request = ResourceRequest(gpus=2, cpus=4.0, memory_bytes=16 * GiB)

    assert demand_of(request) == Demand(2.0, None, 4.0, 16 * GiB)
    assert demand_of(ResourceRequest(cpus=0.5)) == Demand(0.0, None, 0.5, 0)


def test_requests_of_one_shape_get_one_demand_from_the_cache():
    cache = DemandCache()
    first = cache.of(ResourceRequest(gpus=1, cpus=2.0))

    assert cache.of(ResourceRequest(gpus=1, cpus=2.0)) is first
    assert cache.of(ResourceRequest(gpus=1, cpus=3.0)) == Demand(1.0, None, 3.0, 0)


# -- the share a fraction takes ------------------------------------------------------------------


def test_a_share_alone_takes_that_part_of_the_gpus_memory():
    gpu = free(node("node-a").gpus(1, memory=80 * GiB).build()).gpus[0]

    assert fraction_demand(demand(0.25), gpu) == (0.25, 20 * GiB)


def test_a_share_with_gpu_memory_takes_the_memory_asked_whatever_the_gpu():
    gpu = free(node("node-a").gpus(1, memory=80 * GiB).build()).gpus[0]

    assert fraction_demand(demand(0.5, gpu_memory=10 * GiB), gpu) == (0.5, 10 * GiB)


def test_gpu_memory_alone_takes_its_part_of_the_gpu_as_a_share_at_most_all_of_it():
    small, large = free(node("node-a").gpus(1, memory=40 * GiB).gpus(1).build()).gpus

    assert fraction_demand(demand(gpu_memory=20 * GiB), small) == (0.5, 20 * GiB)
    assert fraction_demand(demand(gpu_memory=20 * GiB), large) == (0.25, 20 * GiB)
    assert fraction_demand(demand(gpu_memory=100 * GiB), large) == (1.0, 100 * GiB)


def test_gpu_memory_alone_on_a_gpu_reporting_no_memory_takes_all_of_it():
    gpu = free(node("node-a").gpus(1, memory=0).build()).gpus[0]

    assert fraction_demand(demand(gpu_memory=GiB), gpu) == (1.0, GiB)


def test_the_least_share_of_a_fraction_is_its_share_or_its_memory_on_the_largest_gpu():
    assert least_fraction_share(demand(0.3), 80 * GiB) == 0.3
    assert least_fraction_share(demand(gpu_memory=20 * GiB), 80 * GiB) == 0.25
    assert least_fraction_share(demand(gpu_memory=100 * GiB), 80 * GiB) == 1.0
    assert least_fraction_share(demand(gpu_memory=20 * GiB), 0) == 1.0  # a pool of no GPU


# -- whether a fraction fits a GPU ---------------------------------------------------------------


def three_quarters_used() -> NodeState:
    """node-a: GPU 0 three quarters used (60 of its 80 GiB), GPU 1 held whole."""
    return free(
        node("node-a").gpus(2).build(),
        allocation(10, "node-a", (0, 0.75, 60 * GiB)),
        allocation(11, "node-a", (1, 1.0, 80 * GiB)),
    )


def test_a_fraction_fits_the_room_left_to_within_the_share_margin():
    gpu = three_quarters_used().gpus[0]

    assert fraction_fits(gpu, 0.25, 20 * GiB)
    assert fraction_fits(gpu, 0.25 + SHARE_EPSILON / 2, 20 * GiB)  # a float sum's error
    assert not fraction_fits(gpu, 0.25 + 3 * SHARE_EPSILON, 20 * GiB)
    assert share_fits(gpu, 0.25 + SHARE_EPSILON / 2)
    assert not share_fits(gpu, 0.26)


def test_a_fraction_needs_the_gpus_memory_too_and_a_share_alone_does_not():
    gpu = three_quarters_used().gpus[0]

    assert not fraction_fits(gpu, 0.1, 20 * GiB + 1)
    assert share_fits(gpu, 0.1)


def test_nothing_fits_a_gpu_held_whole():
    gpu = three_quarters_used().gpus[1]

    assert not fraction_fits(gpu, 0.0, 0)
    assert not share_fits(gpu, 0.0)


# -- the free GPUs a whole-GPU demand may take -----------------------------------------------------


def mixed() -> NodeState:
    """node-a: GPUs 0 and 1 are A100s of 40 GiB, 2 and 3 H100s of 80 GiB; GPU 2 is held."""
    pool = node("node-a").gpus(2, memory=40 * GiB, model=A100_40).gpus(2, model=H100)
    return free(pool.build(), allocation(10, "node-a", (2, 1.0, 80 * GiB)))


def indexes(gpus: list[GpuState]) -> list[int]:
    return [gpu.index for gpu in gpus]


def test_a_whole_gpu_demand_may_take_every_free_gpu_in_index_order():
    node_state = mixed()

    assert indexes(whole_gpus_on(node_state, demand(1))) == [0, 1, 3]
    assert indexes(whole_gpus_on(node_state, demand(1), Where())) == [0, 1, 3]


def test_a_gpu_memory_floor_leaves_out_the_smaller_gpus():
    assert indexes(whole_gpus_on(mixed(), demand(1, gpu_memory=80 * GiB))) == [3]
    assert indexes(whole_gpus_on(mixed(), demand(1, gpu_memory=40 * GiB))) == [0, 1, 3]


def test_gpu_types_leave_out_the_other_models_and_the_memory_floor_still_counts():
    assert indexes(whole_gpus_on(mixed(), demand(1), Where(("a100",)))) == [0, 1]
    assert indexes(whole_gpus_on(mixed(), demand(1), Where(("H100",)))) == [3]
    floor = demand(1, gpu_memory=80 * GiB)
    assert whole_gpus_on(mixed(), floor, Where(("A100",))) == []


# -- where a job may go ------------------------------------------------------------------------


def test_a_where_is_restricted_by_gpu_types_or_a_node_veto():
    assert not Where().restricted
    assert Where(("A100",)).restricted
    assert Where(node_ok=lambda node_state, wanted: True).restricted


def test_a_gpu_model_is_allowed_by_a_type_that_names_it_in_any_case():
    where = Where(("a100", "L4"))

    assert where.model_ok(A100)
    assert where.model_ok("NVIDIA L4")
    assert not where.model_ok(H100)
    assert not where.model_ok("NVIDIA L40S"), "L4 does not name an L40S"
    assert Where().gpu_ok(free(node("node-a").gpus(1, model=H100).build()).gpus[0])


def test_a_node_is_allowed_when_it_has_a_gpu_of_the_types_and_its_veto_agrees():
    h100s = free(node("node-a").gpus(2, model=H100).build())
    asked: list[tuple[str, Demand]] = []

    def veto(node_state: NodeState, wanted: Demand) -> bool:
        asked.append((node_state.name, wanted))
        return False

    assert Where(("H100",)).node_allowed(h100s, demand(1))
    assert not Where(("A100",)).node_allowed(h100s, demand(1))
    assert not Where(("H100",), node_ok=veto).node_allowed(h100s, demand(2))
    assert asked == [("node-a", demand(2))]


# -- whether a demand fits what a node has free ----------------------------------------------------


def test_whole_gpus_fit_as_many_free_gpus_of_the_types_asked():
    node_state = mixed()  # free: A100s 0 and 1, H100 3

    assert fits_free(node_state, demand(3), Where())
    assert not fits_free(node_state, demand(4), Where())
    assert fits_free(node_state, demand(2), Where(("A100",)))
    assert not fits_free(node_state, demand(2), Where(("H100",)))
    assert not fits_free(node_state, demand(2, gpu_memory=80 * GiB), Where())


def test_a_node_veto_is_not_asked_whether_a_demand_fits_what_is_free():
    vetoed = Where(node_ok=lambda node_state, wanted: False)

    assert fits_free(mixed(), demand(1), vetoed)


def test_a_fraction_fits_a_gpu_with_room_of_the_types_asked():
    node_state = three_quarters_used()  # GPU 0: a quarter free; GPU 1 held whole

    assert fits_free(node_state, demand(0.25), Where())
    assert not fits_free(node_state, demand(0.5), Where())
    assert fits_free(node_state, demand(0.25), Where(("H100",)))
    assert not fits_free(node_state, demand(0.25), Where(("A100",)))
    assert fits_free(node_state, demand(gpu_memory=20 * GiB), Where())
    assert not fits_free(node_state, demand(gpu_memory=21 * GiB), Where())


def test_a_demand_fits_only_the_cpus_and_host_memory_left_free():
    node_state = free(
        node("node-a").gpus(1).cpus(8).memory(64 * GiB).build(),
        allocation(10, "node-a", cpus=6.0, memory=48 * GiB),
    )  # 2 CPUs and 16 GiB free

    assert fits_free(node_state, demand(cpus=2.0, memory=16 * GiB), Where())
    assert not fits_free(node_state, demand(cpus=2.5), Where())
    assert not fits_free(node_state, demand(cpus=1.0, memory=17 * GiB), Where())
    assert not fits_free(node_state, demand(1, cpus=3.0), Where())  # its GPU is free


def test_cpus_left_free_by_float_sums_still_fit_what_they_round_to():
    node_state = free(
        node("node-a").cpus(0.3).build(),
        allocation(10, "node-a", cpus=0.1),
        allocation(11, "node-a", cpus=0.1),
    )

    assert node_state.cpus < 0.1  # 0.3 - 0.1 - 0.1 in floats
    assert fits_free(node_state, demand(cpus=0.1), Where())
