"""The running jobs as possible victims (``preemption.candidates``): the level and the work
lost a running job is taken with, and the running jobs kept from one cycle to the next
(``KeptRunning``, ``leased_running``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler import SchedulerState
from gpupool.scheduler.preemption import KeptRunning, leased_running, running_jobs
from gpupool.scheduler.types import Allocation
from tests.support.scheduling import NOW, decide, pending, quota, running, victims
from tests.unit.scheduler.preemption import ONE_GPU, TWO_GPUS
from tests.unit.scheduler.test_policy_properties import SETTINGS

# -- a running job's level and the work it loses -----------------------------------------------


def test_the_running_attempt_counts_towards_the_level():
    # 1 GPU for 2,000 s: 2,000 GPU-seconds, past the first threshold (1,800)
    held = [running(100, "node-a", team="a", started_at=NOW - 2_000)]

    decisions = decide(ONE_GPU, [pending(1)], held)

    assert victims(decisions) == {100: 1}


def test_the_running_attempt_counts_every_gpu_it_holds():
    two_for_1000 = [running(100, "node-a", [0, 1], team="a", started_at=NOW - 1_000)]
    two_for_800 = [running(100, "node-a", [0, 1], team="a", started_at=NOW - 800)]

    assert victims(decide(TWO_GPUS, [pending(1, gpus=2)], two_for_1000)) == {100: 1}
    assert victims(decide(TWO_GPUS, [pending(1, gpus=2)], two_for_800)) == {}


def test_a_job_never_checkpointed_loses_everything_since_its_start():
    held = [
        running(100, "node-a", [0], started_at=NOW - 1_000),
        running(101, "node-a", [1], started_at=NOW - 1_000, checkpoint_at=NOW - 500),
    ]

    decisions = decide(TWO_GPUS, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {101: 1}


# -- running jobs kept from one cycle to the next ----------------------------------------------


# The running jobs kept from one cycle to the next (``preemption.leased_running``): brought
# up to date with the allocations come and gone and the time gone by, they are the jobs a
# cycle would work out anew (levels, work a restart loses, victims by node), and those
# levels are the attained service's.

POLICIES = (DEFAULT_POLICY, replace(DEFAULT_POLICY, order="srtf"))


def victims_by_node(by_node) -> dict[str, list[int]]:  # noqa: ANN001
    return {node: sorted(job.job_id for job in jobs) for node, jobs in by_node.items() if jobs}


@st.composite
def job_allocations(draw, job_id: int) -> list[Allocation]:
    """A job's tasks: one, or a gang over nodes, whole GPUs or shares of one."""
    traits = {
        "team": draw(st.sampled_from("ab")),
        "priority": draw(st.sampled_from((0, 5))),
        "preemptible": draw(st.booleans()),
        "started_at": NOW - draw(st.sampled_from((10.0, 2_000.0, 40_000.0))),
        "checkpoint_at": draw(st.sampled_from((None, NOW - 5.0))),
    }
    tasks = draw(st.integers(1, 3))
    share = draw(st.sampled_from((1.0, 0.5)))
    return [
        running(
            job_id,
            f"node-{draw(st.integers(0, 3))}",
            [draw(st.integers(0, 3))],
            share=share,
            task=task,
            attained=draw(st.sampled_from((0.0, 3_000.0, 500_000.0))),
            stopping=draw(st.booleans()) and draw(st.booleans()),
            **traits,
        )
        for task in range(tasks)
    ]


@st.composite
def histories(draw) -> list[tuple[tuple[Allocation, ...], float]]:
    """The allocations and clock of a few cycles: jobs start, end, start to stop (a new
    allocation object) or start again as new objects; time goes by."""
    present: dict[int, list[Allocation]] = {}
    cycles = []
    now = NOW
    for _ in range(draw(st.integers(1, 6))):
        for job_id in draw(st.lists(st.integers(1, 10), max_size=5)):
            if job_id in present and draw(st.booleans()):
                del present[job_id]
            elif job_id in present and draw(st.booleans()):
                present[job_id] = [replace(a, stopping=True) for a in present[job_id]]
            else:
                present[job_id] = draw(job_allocations(job_id))
        now += draw(st.sampled_from((0.0, 1.0, 1_000.0, 100_000.0)))
        jobs = list(present.values())
        if draw(st.booleans()):  # the jobs in another order (a job's tasks in theirs)
            jobs.reverse()
        allocations = tuple(a for parts in jobs for a in parts)
        cycles.append((allocations, now))
    return cycles


@SETTINGS
@given(st.sampled_from(POLICIES), histories())
def test_the_kept_running_jobs_are_those_worked_out_anew(policy, history):
    kept = KeptRunning(policy, SchedulerState())
    for allocations, now in history:
        remaining = {allocation.job_id: now / 1_000 for allocation in allocations}
        jobs = kept.update(allocations, now, remaining)
        expected = running_jobs(allocations, policy, now, remaining)
        assert jobs == expected  # levels, work lost, GPUs, allocations in the snapshot's order
        by_node = {}
        for job in expected.values():
            if job.preemptible or job.stopping:
                for node in {allocation.node for allocation in job.allocations}:
                    by_node.setdefault(node, []).append(job.job_id)
        assert victims_by_node(kept.by_node) == {n: sorted(ids) for n, ids in by_node.items()}


def test_a_gang_is_levelled_by_its_first_task_and_the_others_service_in_this_attempt():
    # earlier attempts' service is counted once (each task carries it), this one per task
    tasks = tuple(
        running(1, f"node-{task}", task=task, attained=33_000.0, started_at=NOW - 2_000.0)
        for task in range(2)
    )
    job = running_jobs(tasks, DEFAULT_POLICY, NOW, {})[1]
    assert job.gpus == 2.0
    assert job.level == 2  # 33,000 + 2 x 2,000 GPU-seconds: past 1,800 and 36,000 ...
    one = running_jobs(tasks[:1], DEFAULT_POLICY, NOW, {})[1]
    assert one.level == 1  # ... and 33,000 + 2,000 on one task: past 1,800 only


def test_a_job_climbs_a_level_in_the_kept_jobs_as_its_service_grows():
    task = running(1, "node-0", started_at=NOW - 60.0)  # one GPU for a minute
    kept = KeptRunning(DEFAULT_POLICY, SchedulerState())
    assert kept.update((task,), NOW, {})[1].level == 0
    later = NOW + DEFAULT_POLICY.las_thresholds[0]  # past the first threshold
    job = kept.update((task,), later, {})[1]
    assert job.level == 1
    assert job.lost == later - task.started_at


def test_a_cycle_that_fails_leaves_no_running_jobs_kept():
    state = SchedulerState()
    with leased_running(state, DEFAULT_POLICY) as kept:
        pass
    assert state.running is kept
    with pytest.raises(RuntimeError), leased_running(state, DEFAULT_POLICY):
        raise RuntimeError("a bug")
    assert state.running is None


def test_allocations_of_one_task_twice_are_worked_out_anew_each_cycle():
    task = running(1, "node-0", started_at=NOW - 60.0)
    twice = (task, replace(task, node="node-1"))
    kept = KeptRunning(DEFAULT_POLICY, SchedulerState())
    assert kept.update(twice, NOW, {}) == running_jobs(twice, DEFAULT_POLICY, NOW, {})
    assert kept.update((task,), NOW, {}) == running_jobs((task,), DEFAULT_POLICY, NOW, {})
