"""The ``tiresias`` baseline: Tiresias' DLAS-GPU as its simulator runs it.

Its two knobs, on hand-made traces on one GPU with levels at 10 and 20 GPU-seconds:
``level_wakeups`` (a job is demoted the moment it crosses a threshold, so a job waiting at
the level it left preempts it then, not at the next arrival or completion; a waiting job
starves at its time, where a starvation factor is set) and
``dlas_queues`` (one list per level: a job that has just reached a level stands behind the
jobs waiting there, a job preempted after it ran at its level before them).
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.domain.policy import Policy
from gpupool.scheduler.ordering import dlas_place
from gpupool.scheduler.types import PendingJob
from gpupool.sim.engine import SimResult, cluster, simulate
from gpupool.sim.policies import named
from tests.support import scheduling
from tests.support.traces import job

SMALL = replace(named("tiresias"), las_thresholds=(10.0, 20.0))


def spans(result: SimResult) -> dict[int, tuple[float, float]]:
    return {record.job_id: (record.start, record.end) for record in result.records}


def replay(trace: list, policy: Policy) -> SimResult:
    return simulate(trace, cluster("1x1"), settings=policy, placement="count")


def test_a_job_is_demoted_the_moment_it_crosses_a_threshold():
    trace = [job(1, 0, 100, 1), job(2, 1, 5, 1)]
    # at 10 job 1 reaches level 1 and job 2 (level 0) takes its GPU; job 1 ends 5 s later
    assert spans(replay(trace, SMALL)) == {1: (0, 105), 2: (10, 15)}
    # without the wake-up job 1's crossing is seen at the next event: its end
    late = replay(trace, replace(SMALL, level_wakeups=False))
    assert spans(late) == {1: (0, 100), 2: (100, 105)}


def test_a_job_that_just_reached_a_level_queues_behind_those_waiting_there():
    trace = [job(1, 0, 15, 1), job(2, 1, 100, 1)]
    # 10: job 1 reaches level 1, job 2 (level 0) preempts it; 20: job 2 reaches level 1,
    # behind job 1 waiting there, which takes the GPU back and ends at 25
    assert spans(replay(trace, SMALL)) == {1: (0, 25), 2: (10, 115)}
    # with levels alone job 2 keeps its GPU at level 1: job 1 waits until job 2 reaches 2
    plain = replay(trace, replace(SMALL, dlas_queues=False))
    assert spans(plain) == {1: (0, 35), 2: (10, 115)}


def test_jobs_take_turns_at_each_threshold_and_the_last_level_never_starves():
    result = replay([job(1, 0, 100, 1), job(2, 1, 100, 1)], SMALL)
    # at 10, 20, 30 and 40 the job reaching a level yields to the one waiting there; at the
    # last level job 1 runs to its end while job 2 waits 80 s: DLAS-GPU has no starvation rule
    assert spans(result) == {1: (0, 120), 2: (10, 200)}
    assert result.preemptions == 4


def test_with_a_starvation_factor_a_job_waiting_at_the_last_level_is_promoted():
    starving = replace(SMALL, starvation_factor=2.0, starvation_min_wait=0.0)
    result = replay([job(1, 0, 100, 1), job(2, 1, 100, 1)], starving)
    # as above until 40; job 2, preempted at 40 with 20 GPU-s, has waited twice that at 80:
    # back to level 0, it preempts job 1 then (the replay wakes at the time it starves)
    assert spans(result) == {1: (0, 200), 2: (10, 160)}
    assert result.preemptions == 5


def pending(job_id: int, attained: float, queued_at: float | None) -> PendingJob:
    """A one-GPU job of team a, submitted at 0, with its service and time queued again."""
    return (
        scheduling.job(job_id)
        .team("a")
        .user("a")
        .submitted(0.0)
        .gpus(1)
        .policy_fields(attained=attained, queued_at=queued_at)
        .build()
    )


def test_the_last_preempted_stands_first_and_a_job_just_reached_last():
    jobs = [
        pending(1, 15.0, 40.0),  # ran 5 GPU-s at level 1, preempted at 40
        pending(2, 10.0, 45.0),  # preempted as it reached level 1, at 45
        pending(3, 15.0, 50.0),  # ran at level 1, preempted at 50
    ]

    def order(policy: Policy) -> list[int]:
        places = {j.job_id: dlas_place(j, 1, j.queued_at or 0.0, policy) for j in jobs}
        return sorted(places, key=places.__getitem__)

    assert order(SMALL) == [3, 1, 2]
    assert order(replace(SMALL, dlas_queues=False)) == [1, 2, 3]  # when each came back


def test_the_knobs_are_off_in_every_other_policy():
    for name in ("default", "fifo", "drf", "srtf-oracle", "las", "best-fit", "fgd"):
        policy = named(name)
        assert not policy.dlas_queues and not policy.level_wakeups, name
    assert named("tiresias").las_thresholds == (3250.0, 7200.0)
