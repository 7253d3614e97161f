"""Teams (``ledger``): guarantees, limits, weights, fair shares, the rule for non-preemptible
work, and the GPUs each team holds counted from one call to the next."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.jobs import Reason
from gpupool.domain.units import GiB
from gpupool.scheduler import SchedulerState
from gpupool.scheduler.ledger import water_fill
from gpupool.scheduler.types import Allocation, PendingJob
from gpupool.sim.policies import named
from tests.support import scheduling
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
from tests.unit.scheduler.test_policy_properties import SETTINGS

ONE_NODE = [gpu_node("node-a", 8)]


def borrowers(count: int = 8, **traits) -> list[Allocation]:
    """Team b's 1-GPU jobs 100, 101... on node-a's GPUs 0, 1..."""
    return [running(100 + i, "node-a", [i], team="b", **traits) for i in range(count)]


def teams_placed(decisions, jobs: list[PendingJob]) -> Counter:
    team = {job.job_id: job.team for job in jobs}
    return Counter(team[placement.job_id] for placement in decisions.placements)


# -- reclaiming a guarantee --------------------------------------------------------------------


def test_owner_reclaims_its_guarantee_from_a_borrower():
    jobs = [pending(i, team="a") for i in range(1, 5)]

    decisions = decide(ONE_NODE, jobs, borrowers(), [quota("a", 4), quota("b", 0)])

    assert len(decisions.preemptions) == 4
    assert set(victims(decisions)) <= set(range(100, 108))
    assert sorted(victims(decisions).values()) == [1, 2, 3, 4]  # each names its own A job
    for preemption in decisions.preemptions:
        assert preemption.code is Reason.PREEMPTED
        assert preemption.message == (  # b's members are not told which of a's jobs
            "preempted for a job of team a: team b is above its fair share "
            "and team a is within its own"
        )
    assert codes(decisions) == dict.fromkeys([1, 2, 3, 4], "Preempting")
    assert decisions.placements == []


def test_non_preemptible_borrowers_keep_their_gpus_and_the_owner_waits():
    jobs = [pending(i, team="a") for i in range(1, 5)]

    decisions = decide(ONE_NODE, jobs, borrowers(preemptible=False), [quota("a", 4)])

    assert decisions.preemptions == []
    assert decisions.placements == []
    assert codes(decisions) == dict.fromkeys([1, 2, 3, 4], "InsufficientGpus")
    assert decisions.pending[1].blockers == ("fair share: team b holds 8 GPUs (share 4 GPUs)",)


def test_a_borrower_is_not_preempted_below_its_fair_share():
    # a is guaranteed 2 and b 6: b holds 8 and keeps 6 however much a asks for
    jobs = [pending(i, team="a") for i in range(1, 7)]

    decisions = decide(ONE_NODE, jobs, borrowers(), [quota("a", 2), quota("b", 6)])

    assert len(decisions.preemptions) == 2
    assert codes(decisions) == {
        1: "Preempting",
        2: "Preempting",
        **dict.fromkeys([3, 4, 5, 6], "InsufficientGpus"),
    }


def test_without_quotas_teams_take_back_an_equal_share():
    jobs = [pending(i, team="a") for i in range(1, 9)]

    decisions = decide(ONE_NODE, jobs, borrowers())

    assert victims(decisions) == {100: 1, 101: 2, 102: 3, 103: 4}


def test_a_team_at_its_fair_share_does_not_preempt():
    held = borrowers(4) + [running(200 + i, "node-a", [4 + i], team="a") for i in range(4)]
    jobs = [pending(i, team="a") for i in range(1, 5)]

    decisions = decide(ONE_NODE, jobs, held)

    assert decisions.preemptions == []
    assert set(codes(decisions).values()) == {"InsufficientGpus"}


def test_reclaim_off_takes_nothing_back():
    jobs = [pending(i, team="a") for i in range(1, 5)]

    decisions = decide(ONE_NODE, jobs, borrowers(), [quota("a", 4)], settings=policy(reclaim=False))

    assert decisions.preemptions == []


def test_the_limit_caps_what_a_team_reclaims():
    jobs = [pending(i, team="a") for i in range(1, 5)]

    decisions = decide(ONE_NODE, jobs, borrowers(), [quota("a", 4, limit=2)])

    assert victims(decisions) == {100: 1, 101: 2}
    assert codes(decisions) == {1: "Preempting", 2: "Preempting", 3: "OverQuota", 4: "OverQuota"}


def test_one_job_needing_two_victims_does_not_push_their_team_below_its_fair_share():
    # pool 3: a is guaranteed 2 (fair 2), b holds 2 on node-a (fair 1). a's 2-GPU job fits only
    # on node-a; taking both of b's jobs leaves b with 0 < 1.
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 1)]
    held = [running(100, "node-a", [0]), running(101, "node-a", [1])]

    decisions = decide(nodes, [pending(1, gpus=2)], held, [quota("a", 2)])

    assert decisions.preemptions == []


def test_a_guarantee_is_reclaimable_from_a_single_large_job():
    # a is guaranteed 1 GPU of 2; b borrows both with one 2-GPU job (fair share 1)
    nodes = [gpu_node("node-a", 2)]

    decisions = decide(nodes, [pending(1)], [running(100, "node-a", [0, 1])], [quota("a", 1)])

    assert victims(decisions) == {100: 1}


def test_a_guarantee_is_reclaimable_from_borrowers_over_their_share_by_fractions():
    nodes = [gpu_node("node-a", 5)]
    held = [
        running(100, "node-a", [0], team="a"),
        running(101, "node-a", [1], team="b"),
        running(102, "node-a", [2], team="b"),
        running(103, "node-a", [3], team="c"),
        running(104, "node-a", [4], team="c"),
    ]

    decisions = decide(nodes, [pending(1)], held, [quota("a", 2)])

    assert len(decisions.preemptions) == 1
    assert codes(decisions) == {1: "Preempting"}


def test_a_team_below_its_guarantee_is_not_kept_out_by_a_new_large_job():
    nodes = [gpu_node("node-a", 3)]
    held = [running(100, "node-a", [2], team="a")]
    jobs = [pending(1, team="b", gpus=2), pending(2, team="a")]

    decisions = decide(nodes, jobs, held, [quota("a", 2), quota("b", 1)])

    assert 2 in placed_ids(decisions) or codes(decisions).get(2) == "Preempting"


# -- limits --------------------------------------------------------------------------------


def test_a_team_at_its_limit_waits_over_quota_with_free_gpus():
    jobs = [pending(i) for i in range(1, 4)]

    decisions = decide(ONE_NODE, jobs, quotas=[quota("a", limit=2)])

    assert placed_ids(decisions) == {1, 2}
    reason = decisions.pending[3]
    assert reason.code is Reason.OVER_QUOTA
    assert reason.message == "team a holds 2 GPUs of its limit of 2 GPUs; this job needs 1 GPU more"
    assert reason.blockers == ("quota: team a holds 2 GPUs of its limit 2 GPUs (guarantee 0 GPUs)",)


def test_running_work_counts_against_the_limit():
    held = [running(100, "node-a", [0], team="a"), running(101, "node-a", [1], team="a")]

    decisions = decide(ONE_NODE, [pending(1)], held, [quota("a", 1, limit=2)])

    assert codes(decisions) == {1: "OverQuota"}


def test_a_job_larger_than_what_is_left_of_the_limit_waits_while_a_smaller_one_runs():
    jobs = [pending(1, gpus=2), pending(2, gpus=1)]

    decisions = decide(
        ONE_NODE, jobs, [running(100, "node-a", [0], team="a")], [quota("a", limit=2)]
    )

    assert placed_ids(decisions) == {2}
    assert codes(decisions) == {1: "OverQuota"}


def test_fractions_count_against_the_limit():
    jobs = [pending(1, gpus=0.5), pending(2, gpus=0.5), pending(3, gpus=0.5)]

    decisions = decide(
        ONE_NODE, jobs, [running(100, "node-a", [0], team="a")], [quota("a", limit=2)]
    )

    assert placed_ids(decisions) == {1, 2}
    assert codes(decisions) == {3: "OverQuota"}


def test_gpu_memory_only_jobs_count_against_the_limit():
    job = scheduling.job(1).team("a").user("a-user").gpu_memory(40 * GiB).build()
    nodes = [gpu_node("node-a", 2)]

    decisions = decide(nodes, [job], [running(100, "node-a", [0], team="a")], [quota("a", limit=1)])

    # the placement would hold 0.5 of GPU 1: 1.5 GPUs against a limit of 1
    assert codes(decisions) == {1: "OverQuota"}


# -- non-preemptible work --------------------------------------------------------------------


def test_non_preemptible_jobs_run_within_their_guarantee():
    jobs = [pending(i, preemptible=False) for i in range(1, 6)]

    decisions = decide(ONE_NODE, jobs, quotas=[quota("a", 4), quota("b", 4)])

    assert placed_ids(decisions) == {1, 2, 3, 4}
    reason = decisions.pending[5]
    assert reason.code is Reason.NOT_GUARANTEED
    assert reason.message.startswith(
        "non-preemptible jobs run within their team's guarantee (4 GPUs for a, 4 GPUs held)"
    )


def test_non_preemptible_jobs_may_use_the_gpus_nobody_is_guaranteed():
    jobs = [pending(i, preemptible=False) for i in range(1, 10)]

    decisions = decide(ONE_NODE, jobs, quotas=[quota("a", 4)])

    assert placed_ids(decisions) == set(range(1, 9))
    assert codes(decisions) == {9: "NotGuaranteed"}


def test_a_team_without_a_guarantee_runs_non_preemptible_work_only_on_unguaranteed_gpus():
    jobs = [pending(i, team="c", preemptible=False) for i in range(1, 4)]

    decisions = decide(ONE_NODE, jobs, quotas=[quota("a", 3), quota("b", 3)])

    assert placed_ids(decisions) == {1, 2}
    assert codes(decisions) == {3: "NotGuaranteed"}


def test_non_preemptible_borrowing_already_running_counts():
    # 2 GPUs are unguaranteed and team c already borrows them without being preemptible
    held = [running(100 + i, "node-a", [i], team="c", preemptible=False) for i in range(2)]

    decisions = decide(
        ONE_NODE, [pending(1, team="d", preemptible=False)], held, [quota("a", 3), quota("b", 3)]
    )

    assert codes(decisions) == {1: "NotGuaranteed"}


def test_preemptible_jobs_beyond_the_guarantee_still_run():
    jobs = [pending(i, preemptible=i > 3) for i in range(1, 7)]

    decisions = decide(ONE_NODE, jobs, quotas=[quota("a", 2), quota("b", 6)])

    assert placed_ids(decisions) == {1, 2, 4, 5, 6}
    assert codes(decisions) == {3: "NotGuaranteed"}


# -- turns and fair shares ---------------------------------------------------------------------


def four_each() -> list[PendingJob]:
    return [pending(i, team="a") for i in range(1, 5)] + [
        pending(i, team="b") for i in range(11, 15)
    ]


def test_teams_share_equally_without_quotas():
    jobs = four_each()

    decisions = decide([gpu_node("node-a", 4)], jobs)

    assert teams_placed(decisions, jobs) == {"a": 2, "b": 2}


def test_a_team_under_its_guarantee_takes_its_turns_first():
    jobs = four_each()

    decisions = decide([gpu_node("node-a", 4)], jobs, quotas=[quota("b", 3)])

    assert teams_placed(decisions, jobs) == {"b": 3, "a": 1}


def test_the_least_served_team_under_its_guarantee_goes_first():
    jobs = four_each()

    decisions = decide([gpu_node("node-a", 3)], jobs, quotas=[quota("a", 2), quota("b", 2)])

    # a: 1 of 2, b: 1 of 2, then both at half their guarantee: a by name
    assert [p.job_id for p in decisions.placements] == [1, 11, 2]


def test_weights_share_the_gpus_nobody_is_guaranteed():
    jobs = four_each()

    decisions = decide([gpu_node("node-a", 4)], jobs, quotas=[quota("a", weight=3)])

    assert teams_placed(decisions, jobs) == {"a": 3, "b": 1}


def test_the_next_cycle_does_not_preempt_what_this_cycle_placed():
    # 4 GPUs, a is guaranteed 2; both teams want 4. Cycle 1 places a 2, b 2; the fair shares
    # are a 3, b 1, so cycle 2 (nothing changed) takes a GPU back from b.
    nodes = [gpu_node("node-a", 4)]
    jobs = four_each()
    quotas = [quota("a", 2)]

    first = decide(nodes, jobs, quotas=quotas)
    by_id = {job.job_id: job for job in jobs}
    started = [a for p in first.placements for a in by_id[p.job_id].started([p], NOW)]
    waiting = [job for job in jobs if job.job_id not in placed_ids(first)]
    second = decide(nodes, waiting, started, quotas, now=NOW + 10)

    assert second.preemptions == []


def test_water_fill_gives_guarantees_then_the_rest_by_weight_up_to_demand_and_limit():
    fair = water_fill(
        10.0,
        {"a": 1.0, "b": 10.0, "c": 10.0, "d": 10.0},
        {"b": 4.0},
        {"d": 1.0},
        {"c": 2.0},
    )

    # b first gets its guarantee (4); of the 6 left, a is capped by its demand and d by its
    # limit; b and c share the other 4 one to two
    assert fair == pytest.approx({"a": 1.0, "b": 4.0 + 4 / 3, "c": 8 / 3, "d": 1.0})


def test_water_fill_scales_guarantees_larger_than_the_pool():
    fair = water_fill(4.0, {"a": 8.0, "b": 8.0}, {"a": 4.0, "b": 4.0}, {}, {})

    assert fair == pytest.approx({"a": 2.0, "b": 2.0})


# -- borrowing does not take what a guarantee needs --------------------------------------------


def test_a_borrower_waits_for_the_turns_of_teams_below_their_guarantee():
    # b (guaranteed 1, served first) wants 3 of the 4 free GPUs: 2 beyond its guarantee, which
    # c (guaranteed 2) needs in this cycle; c's jobs go first, then b's job no longer fits
    jobs = [pending(1, team="b", gpus=3), pending(2, team="c"), pending(3, team="c")]

    decisions = decide([gpu_node("node-a", 4)], jobs, quotas=[quota("b", 1), quota("c", 2)])

    assert placed_ids(decisions) == {2, 3}
    assert codes(decisions) == {1: "InsufficientGpus"}


def test_a_borrower_takes_what_the_guarantees_leave():
    jobs = [pending(1, team="b", gpus=3), pending(2, team="c"), pending(3, team="c")]

    decisions = decide([gpu_node("node-a", 5)], jobs, quotas=[quota("b", 1), quota("c", 2)])

    assert placed_ids(decisions) == {1, 2, 3}


def test_fifo_never_says_waiting_for_fair_share():
    # a holds both GPUs, above its fair share of 1 while c waits: the default says so; fifo
    # has no fair share, so its head only lacks GPUs
    nodes = [gpu_node("node-a", 2)]
    held = [running(100 + i, "node-a", [i], team="a", preemptible=False) for i in range(2)]
    jobs = [pending(1, team="a"), pending(2, team="c")]
    fifo = policy(
        order="fifo",
        fair_share=False,
        reclaim=False,
        las_preemption=False,
        backfill=False,
        skip_blocked=False,
    )

    assert codes(decide(nodes, jobs, held))[1] == "WaitingForFairShare"
    decisions = decide(nodes, jobs, held, settings=fifo)

    assert codes(decisions) == {1: "InsufficientGpus", 2: "Queued"}
    assert not any(b.startswith("fair share") for b in decisions.pending[1].blockers)


@pytest.mark.parametrize(("name", "placed"), [("drf", {2, 3}), ("fifo", {1, 2})])
def test_strict_queues_keep_the_guarantee_rule_without_locking_up(name, placed):
    # drf: b's head waits for c's turns (and its own queue with it), then tries again; fifo is
    # one queue in submit order with no turns, so its head takes the GPUs
    jobs = [pending(1, team="b", gpus=3), pending(2, team="c"), pending(3, team="c")]
    settings = replace(named(name), explain=True)

    decisions = decide(
        [gpu_node("node-a", 4)], jobs, quotas=[quota("b", 1), quota("c", 2)], settings=settings
    )

    assert placed_ids(decisions) == placed
    assert set(decisions.pending) == {1, 2, 3} - placed


# -- the teams' held GPUs kept from one call to the next ------------------------------------------


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.integers(0, 39),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from([0.3, 0.35, 0.5, 1.0]),
            st.booleans(),
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_the_teams_held_gpus_counted_from_the_last_ones_are_those_counted_anew(changes):
    """Forty allocations of three teams, with shares whose sums round, then some ended and
    some started, a few at a time: each team's GPUs held (and held by work that may not be
    preempted), counted from the last call's counts, are those counted anew, to the bit."""
    from gpupool.scheduler import ledger

    held = {
        job: running(
            job,
            "node-a",
            [job % 8],
            team="abc"[job % 3],
            share=(0.3, 0.35, 1.0)[job % 3],
            preemptible=job % 4 != 0,
        )
        for job in range(40)
    }
    state = SchedulerState()
    ledger.held_by_team(tuple(held.values()), state)
    for job, team, share, preemptible, ends in changes:
        if ends:
            held.pop(job, None)
        else:  # a new object, even for a job id already held
            held[job % 7 + 100] = running(
                job % 7 + 100, "node-b", [job % 8], team=team, share=share, preemptible=preemptible
            )
        allocations = tuple(held.values())
        counted = ledger.held_by_team(allocations, state)  # from the last call's counts
        assert state.team_held is not None
        assert counted == ledger.held_by_team(allocations, SchedulerState())
