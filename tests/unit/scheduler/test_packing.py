"""Fragmentation-aware packing (``packing``: FGD) against best fit, its index of node states,
and the workload counted from one call to the next."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.domain.units import GiB
from gpupool.scheduler import SchedulerState
from gpupool.scheduler.capacity import Claim, FreeCapacity
from gpupool.scheduler.fit import Demand
from gpupool.scheduler.packing import Packer, TaskShape, gpu_state, node_fragment, workload_of
from gpupool.scheduler.placement import find_spot, take_spot
from tests.support.scheduling import (
    BEST_FIT,
    allocation,
    gpu_uuid,
    job,
    node,
    pending,
    placed,
    run,
    running,
)

H100 = 80 * GiB


def part(index: int, share: float) -> tuple[int, float, int]:
    return (index, share, int(share * H100))


def test_a_fraction_goes_where_the_typical_task_still_fits():
    # node-a: a GPU a quarter used (0.75 free); node-b: a GPU half used (0.5 free). Most of
    # the work asks for half a GPU. Best fit puts a quarter on node-b, where 0.25 is left
    # that no half can use; FGD puts it on node-a, where a half still fits after it.
    nodes = [node("node-a").gpus(1), node("node-b").gpus(1), node("node-c").gpus(6)]
    held = [allocation(10, "node-a", part(0, 0.25)), allocation(11, "node-b", part(0, 0.5))]
    held += [allocation(20 + i, "node-c", part(i, 0.5)) for i in range(6)]
    jobs = [job(1).gpus(0.25)]

    assert placed(run(nodes, jobs, held, policy=BEST_FIT))[1][0] == "node-b"
    fgd = placed(run(nodes, jobs, held))
    assert fgd[1][0] == "node-a"
    assert fgd[1][1][0].uuid == gpu_uuid("node-a", 0)


def test_whole_gpus_keep_a_node_free_that_the_large_jobs_of_the_workload_need():
    # A 3-GPU job and two 8-GPU jobs wait; best fit and FGD both keep node-a (8 GPUs) for
    # the 8-GPU job, and FGD puts the 3 GPUs on node-b because the workload has 8-GPU jobs
    nodes = [node("node-a").gpus(8), node("node-b").gpus(4)]
    jobs = [job(1).gpus(3), job(2).gpus(8), job(3).gpus(8)]

    decisions = run(nodes, jobs)

    assert placed(decisions)[1][0] == "node-b"
    assert placed(decisions)[2][0] == "node-a"


def test_without_large_jobs_in_the_workload_whole_gpus_leave_no_stranded_gpu():
    # Only 2- and 3-GPU work: 3 GPUs on node-b (4) would strand its last GPU for every task
    # of the workload, on node-a (8) they leave 5 that a 2 or a 3 can use
    nodes = [node("node-a").gpus(8), node("node-b").gpus(4), node("node-c").gpus(2)]

    decisions = run(nodes, [job(1).gpus(2), job(2).gpus(3)])

    assert placed(decisions)[1][0] == "node-c"  # it fills node-c: nothing left to strand
    assert placed(decisions)[2][0] == "node-a"


def test_node_fragment_counts_what_the_shape_cannot_use():
    models = ("H100",) * 4
    half = TaskShape(0.5, (), 1.0)
    two = TaskShape(2.0, (), 1.0)
    assert node_fragment((1.0, 0.25, 0.5, 0.0), models, half) == 0.25
    assert node_fragment((0.25, 0.25, 0.0, 0.0), models, half) == 0.5  # it fits nowhere
    assert node_fragment((1.0, 1.0, 0.5, 0.0), models, two) == 0.5
    assert node_fragment((1.0, 0.5, 0.5, 0.0), models, two) == 2.0
    typed = TaskShape(1.0, ("A100",), 1.0)
    assert node_fragment((1.0, 1.0), ("H100", "A100-SXM4"), typed) == 1.0


def test_the_workload_counts_running_and_waiting_tasks_by_shape():
    held = [allocation(10, "node-a", part(0, 0.5)), allocation(11, "node-a", part(1, 1.0))]
    held.append(allocation(12, "node-a", part(2, 1.0), part(3, 1.0)))
    pending = [job(1).gpus(0.5).build(), job(2).gpus(2).build(), job(3).build()]

    shapes = {
        (shape.gpus, shape.types): shape.weight
        for shape in workload_of(held, pending, SchedulerState())
    }

    assert shapes == {(0.5, ()): 0.4, (1.0, ()): 0.2, (2.0, ()): 0.4}


@st.composite
def pools_and_demands(draw):
    nodes = []
    held = []
    job_id = 100
    for n in range(draw(st.integers(1, 6))):
        name = f"node-{n}"
        count = draw(st.integers(1, 8))
        nodes.append(node(name).gpus(count).build())
        for index in range(count):
            share = draw(st.sampled_from([0.0, 0.0, 0.25, 0.5, 0.75, 1.0]))
            if share:
                job_id += 1
                held.append(allocation(job_id, name, part(index, share)))
    demands = draw(
        st.lists(st.sampled_from([0.25, 0.5, 0.75, 1.0, 2.0, 3.0, 4.0, 8.0]), min_size=1)
    )
    return nodes, held, demands


@settings(max_examples=150, deadline=None)
@given(pools_and_demands())
def test_fgd_fits_wherever_best_fit_fits(case):
    """One task at a time, FGD finds a spot exactly when best fit does, and the spot fits."""
    nodes, held, demands = case
    fgd = FreeCapacity(nodes, held)
    packer = Packer(allocations=held)
    best_fit = FreeCapacity(nodes, held)
    for gpus in demands:
        demand = Demand(gpus, None, 0.0, 0)
        claim = find_spot(demand, fgd, packer=packer)
        reference = find_spot(demand, best_fit)
        assert (claim is None) == (reference is None)
        if claim is None:
            continue
        for gpu, share, _ in claim.parts:
            assert gpu.free if share >= 1.0 else gpu.free_share >= share - 1e-9
        take_spot(claim, demand, fgd)
        take_spot(reference, demand, best_fit)


def test_the_default_policy_packs_by_fragmentation():
    assert DEFAULT_POLICY.packing == "fgd"
    assert BEST_FIT.packing == "best-fit"


def test_a_nodes_gpu_state_is_never_that_of_a_change_undone():
    # the state is kept with the node from cycle to cycle, by the node's version: a cycle's
    # changes undone put an older version back, which the next cycle's change reaches again
    capacity = FreeCapacity([node("n1").gpus(4).build()], ())
    shapes = [TaskShape(1, (), 1.0)]
    state = capacity.nodes[0]
    gpu = state.gpus[0]
    capacity.journal()
    capacity.take(Claim(state, ((gpu, 1.0, gpu.memory_bytes),)), 0.0, 0)
    whole_taken = Packer(shapes).state(state)
    capacity.rollback()
    capacity.journal()
    capacity.take(Claim(state, ((gpu, 0.5, gpu.memory_bytes // 2),)), 0.0, 0)

    assert Packer(shapes).state(state) == gpu_state(state) != whole_taken


def test_the_workload_counted_from_the_last_one_is_that_counted_anew():
    from gpupool.scheduler import packing

    held = [running(job, "node-a", [job % 8], share=0.5 if job % 2 else 1.0) for job in range(20)]
    jobs = [pending(job, gpus=(0.25, 1, 2)[job % 3]) for job in range(100, 130)]
    state = SchedulerState()
    first = packing.workload_of(tuple(held), tuple(jobs), state)
    assert packing.workload_of(tuple(held), tuple(jobs), SchedulerState()) == first
    # two started, one ended, one came: counted from the last call
    held = held[1:] + [running(100, "node-b", [0], share=0.25), running(101, "node-b", [1])]
    jobs = jobs[2:] + [pending(200, gpus=8)]
    counted = packing.workload_of(tuple(held), tuple(jobs), state)
    assert state.workload is not None
    assert counted == packing.workload_of(tuple(held), tuple(jobs), SchedulerState())
    assert len(counted) == 5  # the 8-GPU shape came, none went
