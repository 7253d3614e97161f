"""Preemption (``preemption``): inside a team (priority, least-attained-service levels),
stopping work, the order in which victims are chosen, the running jobs kept from one cycle to
the next, and nominations."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.jobs import Reason
from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.capacity import Claim
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.fit import Where
from gpupool.scheduler.preemption import (
    MAX_NODES_EXAMINED,
    KeptRunning,
    Preemptor,
    leased_running,
    running_jobs,
)
from gpupool.scheduler.types import NOMINATION_TTL, Allocation, Decisions, Nomination, Snapshot
from tests.support.clock import ManualClock
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
from tests.unit.scheduler.test_policy_properties import SETTINGS

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


def test_across_nodes_the_cheapest_set_wins_over_the_node_whose_victim_comes_first():
    """node-a's two one-GPU jobs each lose 100 GPU-s (the least of any victim, all at level
    0: they come first), 200 together; node-b's one two-GPU job loses 120: the cheaper set.
    The search goes on past node-a because node-b's floor is below node-a's cost (a floor
    that put the work lost where the standing belongs once stopped it at node-a)."""
    held = [
        running(100, "node-a", [0], started_at=NOW - 500, checkpoint_at=NOW - 100),
        running(101, "node-a", [1], started_at=NOW - 500, checkpoint_at=NOW - 100),
        running(102, "node-b", [0, 1], started_at=NOW - 500, checkpoint_at=NOW - 60),
    ]
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 2)]

    decisions = decide(nodes, [pending(1, gpus=2)], held, [quota("a", 2)])

    assert victims(decisions) == {102: 1}


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


# -- running jobs kept from one cycle to the next --------------------------------------------------


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


# -- nominations -----------------------------------------------------------------------------------


# Nominations: a job that preempts is nominated to the GPUs its victims free, and keeps them.
#
# Without them, the GPUs a preemption frees go to whoever comes first in the next cycle
# (another team's turn, or the victims, queued again), and the preempting job preempts again:
# a preemption loop. The scheduler reports the nominations in ``Decisions.nominations`` and
# reads them back from ``Snapshot.nominations``.

FOUR_GPUS = [gpu_node("node-a", 4)]
LEVEL_2_ATTAINED = 40_000.0  # GPU-seconds: past the second default threshold (36,000)


def cycle(nodes, jobs, allocations=(), quotas=(), nominations=None, now: float = NOW) -> Decisions:
    snapshot = Snapshot(
        tuple(nodes),
        tuple(allocations),
        tuple(jobs),
        tuple(quotas),
        nominations=dict(nominations or {}),
    )
    return schedule(snapshot, ManualClock(now))


def own_team_victims():
    """Team a's four long 1-GPU jobs on node-a; its new 4-GPU job outranks them (LAS)."""
    return [running(100 + i, "node-a", [i], team="a", attained=LEVEL_2_ATTAINED) for i in range(4)]


def requeued(job_id: int) -> object:
    return pending(job_id, team="a", attained=LEVEL_2_ATTAINED, submitted=0.0)


def test_a_preempting_job_is_nominated_to_its_victims_gpus():
    decisions = cycle(FOUR_GPUS, [pending(1, gpus=4)], own_team_victims())

    assert sorted(p.job_id for p in decisions.preemptions) == [100, 101, 102, 103]
    assert decisions.nominations == {1: Nomination(1, (("node-a", (0, 1, 2, 3)),), NOW)}
    reason = decisions.pending[1]
    assert reason.code is Reason.PREEMPTING
    assert reason.message.endswith("; GPUs 0-3 on node-a are being freed for it")


def test_free_gpus_beside_the_victims_are_kept_for_it_at_once():
    held = [running(100, "node-a", [0, 1], team="a", attained=LEVEL_2_ATTAINED)]
    jobs = [pending(1, gpus=4), pending(2, team="c", submitted=NOW)]

    decisions = cycle(FOUR_GPUS, jobs, held, [quota("a", 4)])

    assert [p.job_id for p in decisions.preemptions] == [100]
    assert decisions.nominations[1].gpus == (("node-a", (0, 1, 2, 3)),)
    assert decisions.placements == []  # team c's job does not take GPU 2 or 3


def test_nominated_gpus_go_to_their_job_not_to_the_victims_or_another_team():
    first = cycle(FOUR_GPUS, [pending(1, gpus=4)], own_team_victims())
    # the victims stopped; they wait again, beside another team's job that came meanwhile
    jobs = [*(requeued(100 + i) for i in range(4)), pending(1, gpus=4), pending(2, team="c")]

    quotas = [quota("c", 1)]  # team c, below its guarantee, has the first turn

    without = cycle(FOUR_GPUS, jobs, (), quotas)
    after = cycle(FOUR_GPUS, jobs, (), quotas, first.nominations)

    assert 1 not in {p.job_id for p in without.placements}  # the loop: others take the GPUs
    assert {p.job_id for p in after.placements} == {1}
    assert sorted(share.uuid for p in after.placements for share in p.gpus) == [
        f"GPU-node-a-{i}" for i in range(4)
    ]
    assert after.preemptions == []
    assert after.nominations == {}  # it started: the nomination is spent


def test_a_job_whose_victims_still_stop_preempts_nobody_else():
    stopping = [
        running(100 + i, "node-a", [i], team="a", attained=LEVEL_2_ATTAINED, stopping=True)
        for i in range(4)
    ]
    other = running(200, "node-b", [0, 1, 2, 3], team="b")
    nominations = {1: Nomination(1, (("node-a", (0, 1, 2, 3)),), NOW - 5.0)}
    nodes = [*FOUR_GPUS, gpu_node("node-b", 4)]

    decisions = cycle(nodes, [pending(1, gpus=4)], [*stopping, other], [quota("a", 4)], nominations)

    assert decisions.preemptions == []
    assert decisions.nominations == nominations
    assert codes(decisions) == {1: "Preempting"}
    assert decisions.pending[1].message == (
        "waiting for jobs 100, 101, 102, 103 to stop; GPUs 0-3 on node-a are being freed for it"
    )


def test_partly_freed_gpus_are_held_while_the_rest_stop():
    held = [
        running(100, "node-a", [0, 1], team="a", attained=LEVEL_2_ATTAINED, stopping=True),
    ]
    nominations = {1: Nomination(1, (("node-a", (0, 1, 2, 3)),), NOW - 5.0)}
    jobs = [pending(1, gpus=4), pending(2, team="c", submitted=0.0)]

    decisions = cycle(FOUR_GPUS, jobs, held, nominations=nominations)

    assert decisions.placements == []  # GPUs 2 and 3 are free, but kept for job 1
    assert decisions.nominations == nominations


def test_a_nomination_ends_when_its_node_leaves_or_another_job_holds_its_gpus():
    nominations = {1: Nomination(1, (("node-gone", (0, 1, 2, 3)),), NOW - 5.0)}
    gone = cycle(FOUR_GPUS, [pending(1, gpus=4)], own_team_victims(), nominations=nominations)
    # it may preempt again, and is nominated afresh
    assert len(gone.preemptions) == 4
    assert gone.nominations[1].gpus == (("node-a", (0, 1, 2, 3)),)

    nominations = {1: Nomination(1, (("node-a", (0, 1, 2, 3)),), NOW - 5.0)}
    taken = [running(300, "node-a", [0, 1, 2, 3], team="a", preemptible=False)]
    dropped = cycle(FOUR_GPUS, [pending(1, gpus=4)], taken, nominations=nominations)
    assert dropped.nominations == {}


def test_a_nomination_ends_after_its_time_or_when_its_job_left_the_queue():
    nominations = {
        1: Nomination(1, (("node-a", (0, 1)),), NOW - NOMINATION_TTL - 1.0),
        9: Nomination(9, (("node-a", (2, 3)),), NOW - 5.0),  # job 9 is no longer pending
    }
    jobs = [pending(2, team="c", gpus=4)]

    decisions = cycle(FOUR_GPUS, [*jobs, pending(1, gpus=8)], nominations=nominations)

    assert {p.job_id for p in decisions.placements} == {2}
    assert decisions.nominations == {}


def test_a_gang_is_nominated_to_every_node_it_preempted_on():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [
        running(100, "node-a", [0, 1, 2, 3], team="b"),
        running(101, "node-b", [0, 1, 2, 3], team="b"),
    ]

    first = cycle(nodes, [pending(1, gpus=4, tasks=2)], held, [quota("a", 8)])
    assert sorted(p.job_id for p in first.preemptions) == [100, 101]
    assert first.nominations[1].gpus == (("node-a", (0, 1, 2, 3)), ("node-b", (0, 1, 2, 3)))

    jobs = [pending(100, team="b", gpus=4), pending(1, gpus=4, tasks=2)]
    after = cycle(nodes, jobs, (), [quota("a", 8)], first.nominations)
    assert {p.job_id for p in after.placements} == {1}


def test_snapshots_default_to_no_nominations():
    snapshot = Snapshot(tuple(FOUR_GPUS), (), ())
    assert snapshot.nominations == {}
    assert replace(snapshot).nominations == {}


def test_a_nomination_outlives_its_time_while_its_victims_still_stop():
    stopping = [running(100, "node-a", [0, 1, 2, 3], team="b", stopping=True)]
    nominations = {1: Nomination(1, (("node-a", (0, 1, 2, 3)),), NOW - NOMINATION_TTL - 60.0)}

    decisions = cycle(FOUR_GPUS, [pending(1, gpus=4)], stopping, [quota("a", 4)], nominations)

    assert decisions.preemptions == []
    assert decisions.nominations == nominations
