"""Who may be preempted for whom, and the order victims are taken in
(``preemption.rules``: ``Eligibility``, ``VictimCost``): least-attained service and priority
inside a team, stopping work, and the order of victims on one node."""

from __future__ import annotations

import pytest

from gpupool.domain.jobs import Reason
from tests.support.scheduling import (
    LEVEL_2,
    NOW,
    codes,
    decide,
    gpu_node,
    pending,
    policy,
    quota,
    running,
    victims,
)
from tests.unit.scheduler.preemption import ONE_GPU, TWO_GPUS

# -- least-attained service inside a team ------------------------------------------------------


def test_a_level_0_job_preempts_a_level_2_job_of_its_team():
    decisions = decide(ONE_GPU, [pending(1)], [running(100, "node-a", team="a", attained=LEVEL_2)])

    assert victims(decisions) == {100: 1}
    [preemption] = decisions.preemptions
    assert preemption.code is Reason.PREEMPTED
    assert preemption.message == (
        "preempted for job 1 of the same team: it has received less GPU time "
        "(least-attained-service levels)"
    )
    assert decisions.pending[1].code is Reason.PREEMPTING
    assert (
        decisions.pending[1].message
        == "waiting for job 100 to stop; GPU 0 on node-a is being freed for it"
    )


def test_a_job_never_preempts_one_of_its_own_level():
    decisions = decide(ONE_GPU, [pending(1)], [running(100, "node-a", team="a")])

    assert decisions.preemptions == []
    assert codes(decisions) == {1: "InsufficientGpus"}


def test_a_level_1_job_does_not_preempt_another_level_1_job():
    held = [running(100, "node-a", team="a", attained=2_000.0)]

    decisions = decide(ONE_GPU, [pending(1, attained=2_000.0)], held)

    assert decisions.preemptions == []


def test_a_level_2_job_does_not_preempt_a_level_0_job():
    decisions = decide(ONE_GPU, [pending(1, attained=LEVEL_2)], [running(100, "node-a", team="a")])

    assert decisions.preemptions == []


def test_a_victim_that_has_not_run_its_minimum_runtime_is_spared():
    settings = policy(min_runtime=600.0)
    young = [running(100, "node-a", team="a", attained=LEVEL_2, started_at=NOW - 60)]
    older = [running(100, "node-a", team="a", attained=LEVEL_2, started_at=NOW - 700)]

    assert victims(decide(ONE_GPU, [pending(1)], young, settings=settings)) == {}
    assert victims(decide(ONE_GPU, [pending(1)], older, settings=settings)) == {100: 1}


def test_no_las_preemption_when_it_is_off():
    held = [running(100, "node-a", team="a", attained=LEVEL_2)]

    decisions = decide(ONE_GPU, [pending(1)], held, settings=policy(las_preemption=False))

    assert decisions.preemptions == []


def test_non_preemptible_jobs_of_the_team_are_never_preempted():
    held = [running(100, "node-a", team="a", attained=LEVEL_2, preemptible=False)]

    decisions = decide(ONE_GPU, [pending(1, priority=5)], held)

    assert decisions.preemptions == []


# -- priority ----------------------------------------------------------------------------------


def test_a_higher_priority_job_preempts_a_lower_one_of_its_team():
    decisions = decide(ONE_GPU, [pending(1, priority=5)], [running(100, "node-a", team="a")])

    assert victims(decisions) == {100: 1}
    assert decisions.preemptions[0].message == (
        "preempted for job 1 of the same team: it has a higher priority (5 > 0)"
    )


def test_priority_outranks_the_level():
    held = [running(100, "node-a", team="a", priority=3, attained=LEVEL_2)]

    decisions = decide(ONE_GPU, [pending(1, priority=0)], held)

    assert decisions.preemptions == []


def test_priority_does_not_preempt_another_teams_job():
    # without quotas a and b each have a fair share of half the GPU: a is not within its own
    decisions = decide(ONE_GPU, [pending(1, priority=5)], [running(100, "node-a", team="b")])

    assert decisions.preemptions == []
    assert codes(decisions) == {1: "InsufficientGpus"}


# -- stopping work -----------------------------------------------------------------------------


def test_a_stopping_job_is_waited_for_without_a_new_preemption():
    held = [running(100, "node-a", team="b", stopping=True)]

    decisions = decide(ONE_GPU, [pending(1)], held, [quota("a", 1)])

    assert decisions.preemptions == []
    assert codes(decisions) == {1: "Preempting"}
    assert (
        decisions.pending[1].message
        == "waiting for 1 job of team b to stop; GPU 0 on node-a is being freed for it"
    )


def test_a_stopping_job_is_waited_for_even_when_not_preemptible():
    held = [running(100, "node-a", team="a", stopping=True, preemptible=False)]

    decisions = decide(ONE_GPU, [pending(1)], held)

    assert decisions.preemptions == []
    assert codes(decisions) == {1: "Preempting"}


def test_stopping_jobs_are_taken_first_and_each_victim_once():
    held = [
        running(100, "node-a", [0], team="b"),
        running(101, "node-b", [0], team="b", stopping=True),
    ]
    nodes = [gpu_node("node-a", 1), gpu_node("node-b", 1)]

    decisions = decide(nodes, [pending(1), pending(2)], held, [quota("a", 2)])

    assert victims(decisions) == {100: 2}
    assert (
        decisions.pending[1].message
        == "waiting for 1 job of team b to stop; GPU 0 on node-b is being freed for it"
    )
    assert (
        decisions.pending[2].message
        == "waiting for 1 job of team b to stop; GPU 0 on node-a is being freed for it"
    )


def test_victims_are_never_chosen_twice():
    jobs = [pending(i) for i in range(1, 5)]
    held = [running(100, "node-a", [0]), running(101, "node-a", [1])]

    decisions = decide(TWO_GPUS, jobs, held, [quota("a", 2)])

    assert victims(decisions) == {100: 1, 101: 2}
    assert codes(decisions) == {
        1: "Preempting",
        2: "Preempting",
        3: "InsufficientGpus",
        4: "InsufficientGpus",
    }


# -- the order of victims (on one node) --------------------------------------------------------


def test_another_teams_job_goes_before_one_of_the_own_team():
    held = [
        running(100, "node-a", [0], team="a", attained=LEVEL_2),
        running(101, "node-a", [1], team="b"),
    ]

    decisions = decide(TWO_GPUS, [pending(1)], held, [quota("a", 2)])

    assert victims(decisions) == {101: 1}


def test_the_lower_priority_job_goes_first():
    held = [
        running(100, "node-a", [0], priority=1),
        running(101, "node-a", [1], priority=0),
    ]

    decisions = decide(TWO_GPUS, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {101: 1}


def test_the_higher_level_goes_first():
    held = [
        running(100, "node-a", [0], attained=LEVEL_2, started_at=NOW - 500),
        running(101, "node-a", [1], started_at=NOW - 100),
    ]

    decisions = decide(TWO_GPUS, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {100: 1}


@pytest.mark.parametrize("order", [(100, 101), (101, 100)])
def test_the_job_checkpointed_most_recently_goes_first(order):
    # both ran 1,000 s (level 0); 100 checkpointed 10 s ago, 101 900 s ago: stopping 100 loses
    # 10 s of work, stopping 101 would lose 900 s, so 101 is spared
    checkpoints = {100: NOW - 10, 101: NOW - 900}
    held = [
        running(job_id, "node-a", [i], started_at=NOW - 1_000, checkpoint_at=checkpoints[job_id])
        for i, job_id in enumerate(order)
    ]

    decisions = decide(TWO_GPUS, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {100: 1}


@pytest.mark.parametrize("order", [(100, 101), (101, 100)])
def test_the_worst_ranked_trial_goes_first_even_if_it_loses_more_work(order):
    # two trials of an experiment: 100 ranked last at its rung (standing 0.2), 101 first
    # (1.0); 100 checkpointed longer ago, so by work lost alone 101 would go
    setup = {100: (0.2, NOW - 900), 101: (1.0, NOW - 10)}
    held = [
        running(j, "node-a", [i], started_at=NOW - 1_000, checkpoint_at=setup[j][1],
                standing=setup[j][0])
        for i, j in enumerate(order)
    ]  # fmt: skip

    decisions = decide(TWO_GPUS, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {100: 1}
