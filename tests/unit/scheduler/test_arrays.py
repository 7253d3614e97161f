"""Job arrays' limits (sbatch's ``%N``): at most N tasks of one array hold resources at once."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.jobs import Reason
from gpupool.scheduler.types import Allocation, PendingJob
from tests.support.scheduling import (
    codes,
    decide,
    gpu_node,
    pending,
    placed_ids,
    policy,
    quota,
    running,
    victims,
)

EIGHT = [gpu_node("node-a", 8)]


def task(job_id: int, array_id: int, limit: int | None, **fields: object) -> PendingJob:
    return replace(pending(job_id, **fields), array_id=array_id, array_limit=limit)


def held(job_id: int, array_id: int, gpu: int, **fields: object) -> Allocation:
    return replace(running(job_id, "node-a", [gpu], team="a", **fields), array_id=array_id)


def test_no_more_tasks_start_than_the_limit_and_the_rest_wait_with_array_limit():
    tasks = [task(10 + i, 10, 2) for i in range(4)]

    decisions = decide(EIGHT, tasks)

    assert placed_ids(decisions) == {10, 11}
    assert codes(decisions) == {12: "ArrayLimit", 13: "ArrayLimit"}
    assert decisions.pending[12].message == (
        "array 10 runs at most 2 of its tasks at once (%2) and that many are starting or "
        "running; this task starts when one of them ends"
    )


def test_running_and_stopping_tasks_count_against_the_limit():
    allocations = [held(10, 10, 0), held(11, 10, 1, stopping=True)]
    tasks = [task(12, 10, 3), task(13, 10, 3)]

    decisions = decide(EIGHT, tasks, allocations)

    assert placed_ids(decisions) == {12}
    assert decisions.pending[13].code is Reason.ARRAY_LIMIT


def test_a_gang_task_counts_once_however_many_nodes_it_spans():
    allocations = [held(10, 10, 0, task=0), held(10, 10, 1, task=1)]

    decisions = decide(EIGHT, [task(11, 10, 2)], allocations)

    assert placed_ids(decisions) == {11}


def test_each_array_has_its_own_limit_and_an_array_without_one_has_none():
    jobs = [task(10, 10, 1), task(11, 10, 1), task(20, 20, None), task(21, 20, None)]
    jobs.append(pending(30))

    decisions = decide(EIGHT, jobs)

    assert placed_ids(decisions) == {10, 20, 21, 30}
    assert codes(decisions) == {11: "ArrayLimit"}


def test_tasks_held_back_by_their_limit_do_not_use_up_their_users_tries():
    jobs = [task(10 + i, 10, 1, user="ann") for i in range(6)] + [pending(50, user="ann")]

    decisions = decide(EIGHT, jobs, settings=policy(max_tries=2))

    assert placed_ids(decisions) == {10, 50}


def test_a_task_over_its_limit_preempts_nobody():
    borrowed = [running(100 + i, "node-a", [i], team="b") for i in range(8)]
    allocations = [*borrowed, held(10, 10, 0)]
    allocations = [a for a in allocations if a.job_id != 100]  # job 10 holds GPU 0
    quotas = [quota("a", 8), quota("b", 0)]

    decisions = decide(EIGHT, [task(11, 10, 1)], allocations, quotas)

    assert victims(decisions) == {}
    assert codes(decisions) == {11: "ArrayLimit"}


def test_a_task_under_its_limit_preempts_for_its_slot_and_the_next_one_waits():
    borrowed = [running(100 + i, "node-a", [i], team="b") for i in range(8)]
    quotas = [quota("a", 8), quota("b", 0)]

    decisions = decide(EIGHT, [task(11, 10, 1), task(12, 10, 1)], borrowed, quotas)

    assert set(victims(decisions).values()) == {11}
    assert codes(decisions) == {11: "Preempting", 12: "ArrayLimit"}


@given(
    limit=st.integers(1, 6),
    size=st.integers(1, 12),
    holding=st.integers(0, 4),
    gpus=st.sampled_from([0.25, 0.5, 1, 2]),
)
def test_a_cycle_never_takes_an_array_past_its_limit(
    limit: int, size: int, holding: int, gpus: float
) -> None:
    allocations = [held(100 + i, 7, i) for i in range(holding)]
    tasks = [task(200 + i, 7, limit, gpus=gpus) for i in range(size)]

    decisions = decide([gpu_node("node-a", 16)], tasks, allocations)

    started = len(placed_ids(decisions))
    assert started == max(0, min(size, limit - holding))
    assert set(codes(decisions).values()) <= {"ArrayLimit"}
