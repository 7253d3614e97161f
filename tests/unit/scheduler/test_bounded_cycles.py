"""Bounded work per cycle: ``Policy.max_starts`` cuts a cycle short once it has started (or
preempted for) that many jobs, and its caller runs the next at once; ``Policy.max_tries``
stops trying a user's jobs after that many of them could not start."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_builders import (
    NOW,
    Clock,
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


def started(snapshot: Snapshot, decisions: Decisions) -> Snapshot:
    """The next cycle's snapshot: the placed jobs run, the preempted ones stop at once."""
    jobs = {job.job_id: job for job in snapshot.pending}
    placed: dict[int, list] = {}
    for placement in decisions.placements:
        placed.setdefault(placement.job_id, []).append(placement)
    gone = set(victims(decisions))
    allocations = [a for a in snapshot.allocations if a.job_id not in gone]
    for job_id, placements in placed.items():
        allocations.extend(jobs[job_id].started(placements, Clock().now()))
    return replace(
        snapshot,
        allocations=tuple(allocations),
        pending=tuple(job for job in snapshot.pending if job.job_id not in placed),
        nominations=dict(decisions.nominations),
    )


def until_done(snapshot: Snapshot) -> list[Decisions]:
    """Cycles as the server runs them: again at once while one is cut short."""
    runs = []
    while True:
        decisions = schedule(snapshot, Clock())
        runs.append(decisions)
        if not decisions.more:
            return runs
        snapshot = started(snapshot, decisions)
        assert len(runs) < 100


# -- max_starts ---------------------------------------------------------------------------------


def test_a_cycle_stops_after_max_starts_explains_nothing_and_asks_for_the_next():
    jobs = [pending(i) for i in range(1, 7)]
    snapshot = Snapshot(tuple(EIGHT), (), tuple(jobs), policy=policy(max_starts=4))

    first = schedule(snapshot, Clock())

    assert placed_ids(first) == {1, 2, 3, 4}  # in queue order
    assert first.more is True
    assert first.pending == {}  # the next cycle, at once, explains what is left
    second = schedule(started(snapshot, first), Clock())
    assert placed_ids(second) == {5, 6}
    assert second.more is False


def test_the_cycle_that_starts_exactly_the_last_jobs_is_not_cut_short():
    # job 5, first in the queue, never fits
    jobs = [pending(5, gpu_types=("A100",), submitted=0.5)] + [pending(i) for i in range(1, 5)]

    decisions = decide(EIGHT, jobs, settings=policy(max_starts=4))

    assert placed_ids(decisions) == {1, 2, 3, 4}
    assert decisions.more is False  # nothing left to try: it explains what waits
    assert codes(decisions) == {5: "NoGpuOfType"}


def test_a_job_that_preempts_counts_as_a_start():
    borrowed = [running(100 + i, "node-a", [i], team="b") for i in range(8)]
    jobs = [pending(i, team="a") for i in range(1, 5)]
    quotas = [quota("a", 4), quota("b", 0)]

    decisions = decide(EIGHT, jobs, borrowed, quotas, settings=policy(max_starts=2))

    assert sorted(victims(decisions).values()) == [1, 2]
    assert decisions.more is True
    snapshot = Snapshot(tuple(EIGHT), tuple(borrowed), tuple(jobs), tuple(quotas))
    runs = until_done(replace(snapshot, policy=policy(max_starts=2)))
    assert sum(len(run.preemptions) for run in runs) == 4  # all four reclaimed, two a cycle


def _workloads():
    job = st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from([0.5, 1, 1, 2, 4]),
        st.integers(0, 2),  # priority
    )
    return st.lists(job, min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(_workloads(), st.integers(1, 5))
def test_cycles_cut_short_start_what_one_cycle_starts_when_every_job_fits(workload, bound):
    """Room for all: the cycles cut short start every job one unbounded cycle starts, each
    at most ``bound`` at a time, none twice, and no GPU is over-admitted."""
    nodes = [gpu_node("node-a", 8), gpu_node("node-b", 8), gpu_node("node-c", 8)]
    nodes += [gpu_node(f"node-{i}", 8) for i in range(12)]  # 120 GPUs: 30 jobs of 4 fit
    jobs = [
        pending(i, team=team, gpus=gpus, priority=priority)
        for i, (team, gpus, priority) in enumerate(workload, start=1)
    ]
    snapshot = Snapshot(tuple(nodes), (), tuple(jobs))
    whole = placed_ids(schedule(snapshot, Clock()))
    runs = until_done(replace(snapshot, policy=policy(max_starts=bound)))
    each = [placed_ids(run) for run in runs]
    assert all(len(ids) == bound for ids in each[:-1])
    assert len(each[-1]) <= bound
    assert set().union(*each) == whole == {job.job_id for job in jobs}
    assert sum(len(ids) for ids in each) == len(whole)
    held: dict[str, float] = {}
    for run in runs:
        for placement in run.placements:
            for part in placement.gpus:
                held[part.uuid] = held.get(part.uuid, 0.0) + part.share
    assert max(held.values()) <= 1.0 + 1e-9


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
    assert bounded.more is False  # nothing new until something changes


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
        replace(snapshot, nominations={9: nomination}, policy=policy(max_tries=1)), Clock()
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

    explained = schedule(snapshot, Clock())
    quiet = schedule(replace(snapshot, explain=False), Clock())

    assert quiet.placements == explained.placements and placed_ids(quiet) == {3}
    assert set(explained.pending) == {1, 2, 9}
    assert quiet.pending == {}
