"""Bounded work per cycle: a cycle hands its caller each ``Policy.max_starts`` jobs it has
started (or preempted for) as it goes, deciding the same; ``Policy.max_tries`` stops trying a
user's jobs after that many of them could not start."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.clock import ManualClock
from tests.support.scheduling import (
    NOW,
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

from gpupool.scheduler import schedule
from gpupool.scheduler.types import Decisions, Nomination, Snapshot
from gpupool.sim.policies import named

EIGHT = [gpu_node("node-a", 8)]


def handed(snapshot: Snapshot) -> tuple[list[Decisions], Decisions]:
    """A cycle with a hand-over: what it handed over as it went, and what it returned."""
    parts: list[Decisions] = []
    return parts, schedule(snapshot, ManualClock(NOW), parts.append)


def jobs_of(decisions: Decisions) -> list[int]:
    """The placed jobs, in the order placed (a gang's tasks once)."""
    return list(dict.fromkeys(placement.job_id for placement in decisions.placements))


# -- max_starts: hand over as the cycle goes -----------------------------------------------------


def test_a_cycle_hands_over_each_max_starts_jobs_as_soon_as_decided():
    jobs = [pending(i) for i in range(1, 8)]
    snapshot = Snapshot(tuple(EIGHT), (), tuple(jobs), policy=policy(max_starts=3))

    parts, rest = handed(snapshot)

    assert [jobs_of(part) for part in parts] == [[1, 2, 3], [4, 5, 6]]
    assert jobs_of(rest) == [7]
    assert all(part.pending == {} and part.nominations == {} for part in parts)


def test_a_job_that_preempts_counts_as_a_start_and_its_preemptions_go_with_it():
    borrowed = [running(100 + i, "node-a", [i], team="b") for i in range(8)]
    jobs = [pending(i, team="a") for i in range(1, 5)]
    quotas = [quota("a", 4), quota("b", 0)]
    snapshot = Snapshot(tuple(EIGHT), tuple(borrowed), tuple(jobs), tuple(quotas))

    parts, rest = handed(replace(snapshot, policy=policy(max_starts=2)))

    assert [sorted(victims(part).values()) for part in parts] == [[1, 2], [3, 4]]
    assert rest.preemptions == [] and set(rest.nominations) == {1, 2, 3, 4}
    assert codes(rest) == dict.fromkeys([1, 2, 3, 4], "Preempting")


def _workloads():
    job = st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from([0.5, 1, 1, 2, 4, 8]),
        st.integers(0, 2),  # priority
        st.integers(1, 2),  # tasks
    )
    return st.lists(job, min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(_workloads(), st.integers(1, 5), st.integers(0, 12))
def test_handing_over_changes_no_decision(workload, bound, busy):
    """With or without a hand-over, a cycle decides the same: the parts and the rest, joined
    in order, are the decisions of the cycle without one, whatever ``max_starts``."""
    nodes = [gpu_node(f"node-{i}", 8) for i in range(4)]
    held = [running(100 + i, f"node-{i % 4}", [i // 4], team="c") for i in range(busy)]
    jobs = [
        pending(i, team=team, gpus=gpus, priority=priority, tasks=tasks)
        for i, (team, gpus, priority, tasks) in enumerate(workload, start=1)
    ]
    quotas = (quota("a", 8), quota("b", 8), quota("c", 0))
    snapshot = Snapshot(tuple(nodes), tuple(held), tuple(jobs), quotas)
    whole = schedule(replace(snapshot, policy=policy(max_starts=0)), ManualClock(NOW))

    parts, rest = handed(replace(snapshot, policy=policy(max_starts=bound)))

    assert [p for part in parts for p in part.placements] + rest.placements == whole.placements
    assert [p for part in parts for p in part.preemptions] + rest.preemptions == (whole.preemptions)
    assert (rest.pending, rest.nominations) == (whole.pending, whole.nominations)
    for part in parts:  # each part: ``bound`` jobs placed or preempted for
        assert len(jobs_of(part)) + len({p.for_job for p in part.preemptions}) == bound


# -- max_tries ----------------------------------------------------------------------------------

# six of node-a's GPUs run work nobody may preempt: two are free
FULL = [running(100 + i, "node-a", [i], team="b", preemptible=False) for i in range(6)]


def test_a_user_whose_jobs_could_not_start_max_tries_times_is_tried_no_more():
    jobs = [pending(1, gpus=4), pending(2, gpus=3), pending(3, gpus=1), pending(4, gpus=1)]

    unbounded = decide(EIGHT, jobs, FULL)
    bounded = decide(EIGHT, jobs, FULL, settings=policy(max_tries=2))

    assert placed_ids(unbounded) == {3, 4}
    assert placed_ids(bounded) == set()
    assert codes(bounded) == {
        1: "InsufficientGpus",
        2: "InsufficientGpus",
        3: "Queued",
        4: "Queued",
    }
    assert bounded.pending[3].message == (
        "not tried in this cycle: 2 jobs of user a-user ahead of it could not start (job 1 "
        "first), and a cycle tries no more of a user's jobs after that many; it is tried as "
        "those start or leave"
    )
    assert bounded.pending[4].position == 4


def test_a_user_tried_enough_leaves_the_turns_to_the_teams_other_users():
    """Users x and y of team a have used as much: x, first by job number, is tried twice in
    vain; y's job is still tried, and starts."""
    jobs = [
        pending(1, gpus=4, user="x"),
        pending(2, gpus=3, user="x"),
        pending(3, gpus=1, user="x"),
        pending(4, gpus=1, user="y", submitted=10.0),
    ]

    decisions = decide(EIGHT, jobs, FULL, settings=policy(max_tries=2))

    assert placed_ids(decisions) == {4}
    assert codes(decisions)[3] == "Queued"


def test_a_team_tried_enough_leaves_its_turns_to_the_others():
    jobs = [
        pending(1, gpus=4),
        pending(2, gpus=3),
        pending(3, gpus=1),
        pending(4, team="c", gpus=4),
        pending(5, team="c", gpus=1),
    ]

    decisions = decide(EIGHT, jobs, FULL, settings=policy(max_tries=2))

    assert placed_ids(decisions) == {5}  # team c's own first job failed once only
    assert codes(decisions)[3] == "Queued"


def test_capacity_freed_later_in_the_cycle_does_not_wake_a_team_tried_enough():
    """GPUs 6 and 7 are nominated to team n's job 9, which is now over its team's limit: its
    turn, after team a's, gives them back to all; team a's user, tried enough, is not tried
    again."""
    jobs = [pending(1, gpus=4), pending(2, gpus=1), pending(9, team="n", gpus=2)]
    nomination = Nomination(9, (("node-a", (6, 7)),), NOW)
    quotas = [quota("n", 0, limit=1)]
    snapshot = Snapshot(tuple(EIGHT), tuple(FULL), tuple(jobs), tuple(quotas))

    bounded = schedule(
        replace(snapshot, nominations={9: nomination}, policy=policy(max_tries=1)), ManualClock(NOW)
    )

    assert placed_ids(bounded) == set()  # job 2 would fit on GPU 6 or 7 once they are free
    assert codes(bounded) == {1: "WaitingForFairShare", 2: "Queued", 9: "OverQuota"}


def test_the_jobs_of_a_team_tried_enough_keep_no_free_gpus_from_borrowers():
    """Team a's one user, below the team's guarantee of 4, is tried no more after job 1: its
    job 2 claims none of the 4 free GPUs, so team b may borrow them."""
    half = [running(100 + i, "node-a", [i], team="x", preemptible=False) for i in range(4)]
    jobs = [pending(1, gpus=8), pending(2, gpus=5), pending(3, team="b", gpus=2)]
    quotas = [quota("a", 4), quota("b", 0), quota("x", 0)]

    decisions = decide(EIGHT, jobs, half, quotas, settings=policy(max_tries=1))

    assert placed_ids(decisions) == {3}
    assert codes(decisions)[2] == "Queued"


def test_an_untried_job_over_its_teams_limit_says_so():
    jobs = [pending(1, gpus=4), pending(2, gpus=3), pending(3, gpus=1)]
    quotas = [quota("a", 0, limit=0.5)]

    decisions = decide(EIGHT, jobs, FULL, quotas, settings=policy(max_tries=1))

    assert codes(decisions) == {1: "OverQuota", 2: "OverQuota", 3: "OverQuota"}


def test_the_product_is_bounded_and_the_baselines_try_every_job():
    """Forty 4-GPU jobs that cannot start ahead of a 1-GPU job that can: the product's cycle
    tries 32 of them and leaves it waiting; a baseline of the simulator tries it."""
    jobs = [pending(i, gpus=4) for i in range(1, 41)] + [pending(41, gpus=1)]

    product = decide(EIGHT, jobs, FULL)
    baseline = decide(EIGHT, jobs, FULL, settings=replace(named("best-fit"), explain=True))

    assert codes(product)[41] == "Queued" and placed_ids(product) == set()
    assert "32 jobs of user a-user ahead of it could not start" in product.pending[41].message
    assert placed_ids(baseline) == {41}


def test_a_cycle_asked_not_to_explain_decides_the_same_and_explains_nothing():
    jobs = [pending(1, gpus=4), pending(2, gpus=3), pending(3, gpus=1), pending(9, gpus=8)]
    snapshot = Snapshot(tuple(EIGHT), tuple(FULL), tuple(jobs))

    explained = schedule(snapshot, ManualClock(NOW))
    quiet = schedule(replace(snapshot, explain=False), ManualClock(NOW))

    assert quiet.placements == explained.placements and placed_ids(quiet) == {3}
    assert set(explained.pending) == {1, 2, 9}
    assert quiet.pending == {}
