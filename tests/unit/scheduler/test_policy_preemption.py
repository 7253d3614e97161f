"""Preemption inside a team (priority, least-attained-service levels), stopping work, and
the order in which victims are chosen."""

from __future__ import annotations

import pytest
from tests.support.scheduling import (
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

from gpupool.domain.jobs import Reason
from gpupool.scheduler.capacity import Claim
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.fit import Where
from gpupool.scheduler.preemption import MAX_NODES_EXAMINED, Preemptor
from gpupool.scheduler.types import Snapshot

ONE_GPU = [gpu_node("node-a", 1)]
TWO_GPUS = [gpu_node("node-a", 2)]
TWO_NODES = [gpu_node("node-a", 1), gpu_node("node-b", 1)]
LEVEL_2 = 40_000.0  # GPU-seconds: past the second default threshold (36,000)


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


# -- priority --------------------------------------------------------------------------------


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


# -- stopping work ---------------------------------------------------------------------------


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


# -- the order of victims (on one node) ------------------------------------------------------


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


def test_a_job_never_checkpointed_loses_everything_since_its_start():
    held = [
        running(100, "node-a", [0], started_at=NOW - 1_000),
        running(101, "node-a", [1], started_at=NOW - 1_000, checkpoint_at=NOW - 500),
    ]

    decisions = decide(TWO_GPUS, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {101: 1}


def test_the_victims_freeing_a_multi_gpu_spot_are_on_one_node():
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 2)]
    held = [running(100 + i, f"node-{'ab'[i // 2]}", [i % 2]) for i in range(4)]

    decisions = decide(nodes, [pending(1, gpus=2)], held, [quota("a", 2)])

    assert sorted(victims(decisions)) in ([100, 101], [102, 103])


# -- the order of victims across nodes -------------------------------------------------------


def test_across_nodes_the_lower_priority_job_goes_first():
    held = [
        running(100, "node-a", priority=1),
        running(101, "node-b", priority=0),
    ]

    decisions = decide(TWO_NODES, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {101: 1}


def test_across_nodes_the_higher_level_goes_first():
    held = [
        running(100, "node-a", attained=LEVEL_2, started_at=NOW - 500),
        running(101, "node-b", started_at=NOW - 100),
    ]

    decisions = decide(TWO_NODES, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {100: 1}


def test_across_nodes_the_job_checkpointed_most_recently_goes_first():
    held = [
        running(100, "node-a", started_at=NOW - 1_000, checkpoint_at=NOW - 900),
        running(101, "node-b", started_at=NOW - 1_000, checkpoint_at=NOW - 10),
    ]

    decisions = decide(TWO_NODES, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {101: 1}


def test_across_nodes_a_stopping_job_goes_first():
    for order in ((0, 1), (1, 0)):
        nodes = [TWO_NODES[order[0]], TWO_NODES[order[1]]]
        held = [
            running(100, "node-a"),
            running(101, "node-b", stopping=True),
        ]

        decisions = decide(nodes, [pending(1)], held, [quota("a", 1)])

        assert decisions.preemptions == []
        assert (
            decisions.pending[1].message
            == "waiting for 1 job of team b to stop; GPU 0 on node-b is being freed for it"
        )


# -- the search goes past nodes that could not free enough --------------------------------------


def crowded_nodes(team: str) -> tuple[list, list]:
    """More nodes than a search examines, each one GPU shared by a victim that comes first
    in victim order (checkpointed a moment ago) and a job that may not be preempted: ending
    the victim frees no whole GPU. Then one node whose victim (never checkpointed, so it
    comes last) holds its GPU whole."""
    count = MAX_NODES_EXAMINED + 6
    nodes = [gpu_node(f"node-{index:03d}", 1) for index in range(count)]
    held = []
    for index, node in enumerate(nodes):
        attained = LEVEL_2 if team == "a" else 0.0
        held.append(
            running(
                1000 + index,
                node.name,
                team=team,
                attained=attained,
                share=0.5,
                checkpoint_at=NOW - 10,
            )
        )
        held.append(running(3000 + index, node.name, team=team, share=0.5, preemptible=False))
    nodes.append(gpu_node("node-z", 1))
    held.append(running(100, "node-z", team=team, attained=LEVEL_2 if team == "a" else 0.0))
    return nodes, held


def test_a_victim_is_found_past_the_nodes_whose_victims_free_no_whole_gpu():
    nodes, held = crowded_nodes("a")  # the job's own team, two levels above it

    decisions = decide(nodes, [pending(1)], held)

    assert victims(decisions) == {100: 1}


def test_a_guarantee_is_reclaimed_past_the_nodes_whose_victims_free_no_whole_gpu():
    nodes, held = crowded_nodes("b")  # a borrower far above its guarantee (none)

    decisions = decide(nodes, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {100: 1}
    assert decisions.preemptions[0].message.startswith("preempted for a job of team a")


def test_a_smaller_job_still_searches_where_a_larger_one_found_too_few_victims():
    # job 1 (2 GPUs) fails: node-a could free one GPU at most; job 2 (1 GPU) of the same
    # team and rank is not taken to fail with it (only jobs asking 2 or more would)
    nodes = [gpu_node("node-a", 2)]
    held = [
        running(100, "node-a", [0], team="a", attained=LEVEL_2),
        running(101, "node-a", [1], team="a", preemptible=False),
    ]

    decisions = decide(nodes, [pending(1, gpus=2), pending(2, gpus=1)], held)

    assert victims(decisions) == {100: 2}
    assert codes(decisions)[1] == "InsufficientGpus"


def test_a_job_asking_as_many_gpus_as_no_node_could_free_is_not_searched_for(monkeypatch):
    # job 3 asks fewer CPUs than job 1, so the memo of failed searches (``NoVictims``) does
    # not cover it; but no node could free 2 GPUs for the team at job 1's rank
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 2)]
    held = [
        running(100, "node-a", [0], team="a", attained=LEVEL_2),
        running(101, "node-a", [1], team="a", preemptible=False),
        running(102, "node-b", [0, 1], team="a", preemptible=False),
    ]
    searched: list[int] = []
    search = Preemptor._one_task

    def counted(self, job, *args):  # noqa: ANN001, ANN202
        searched.append(job.job_id)
        return search(self, job, *args)

    monkeypatch.setattr(Preemptor, "_one_task", counted)
    jobs = [pending(1, gpus=2, cpus=4.0), pending(3, gpus=2, cpus=1.0)]

    decisions = decide(nodes, jobs, held)

    assert searched == [1]
    assert decisions.preemptions == []


def test_a_search_that_found_too_few_victims_is_made_again_once_capacity_grows():
    # node-a's GPU 1 is held for a nominated job: its one victim frees one GPU of the two job
    # 1 asks for. The nomination given up (capacity grows), job 2, asking as much at the
    # same rank, is searched for and finds that victim (the record of job 1's search is gone)
    nodes = [gpu_node("node-a", 2)]
    held = [running(100, "node-a", [0], team="a", attained=LEVEL_2)]
    snapshot = Snapshot(tuple(nodes), tuple(held), (pending(1, gpus=2), pending(2, gpus=2)), ())
    cycle = Cycle(snapshot, NOW)
    node = cycle.capacity.by_name["node-a"]
    gpu = node.gpus[1]
    nomination = Claim(node, ((gpu, 1.0, gpu.memory_bytes),))
    cycle.capacity.take(nomination, 0.0, 0)
    first, second = snapshot.pending
    demand = cycle.demands.of(first.request)

    assert cycle.preemptor.find(first, 0, demand, Where(())) is None

    cycle.capacity.give_back(nomination, 0.0, 0)
    cycle._capacity_grew()
    choice = cycle.preemptor.find(second, 0, demand, Where(()))

    assert choice is not None
    assert [victim.job_id for victim in choice.victims] == [100]
