"""The scheduling cycle (``cycle.schedule``) on small, hand-built pools, and the bounds on its
work: a cycle hands its caller each ``Policy.max_starts`` jobs it has started (or preempted for)
as it goes, deciding the same; ``Policy.max_tries`` stops trying a user's jobs after that many
of them could not start."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.jobs import Reason
from gpupool.domain.units import GiB
from gpupool.scheduler import schedule
from gpupool.scheduler.messages import CPU_HINT, MEMORY_HINT
from gpupool.scheduler.types import Decisions, GpuShare, Nomination, Snapshot
from gpupool.sim.policies import named
from tests.support.clock import ManualClock
from tests.support.scheduling import (
    BEST_FIT,
    NOW,
    allocation,
    codes,
    decide,
    gpu_node,
    gpu_uuid,
    job,
    node,
    pending,
    placed,
    placed_ids,
    policy,
    quota,
    run,
    running,
    snapshot,
    victims,
)


def test_one_gpu_job_is_placed():
    decisions = run([node("node-a").gpus(1)], [job(1).gpus(1)])

    assert placed(decisions) == {1: ("node-a", (GpuShare(gpu_uuid("node-a", 0), 1.0, 80 * GiB),))}
    assert decisions.pending == {}
    assert decisions.placements[0].cpus == 1.0
    assert decisions.placements[0].memory_bytes == 0


def test_two_half_gpu_jobs_share_one_gpu():
    decisions = run([node("node-a").gpus(2)], [job(1).gpus(0.5), job(2).gpus(0.5)])

    uuids = {gpus[0].uuid for _, gpus in placed(decisions).values()}
    assert uuids == {gpu_uuid("node-a", 0)}
    assert all(
        g.share == 0.5 and g.memory_bytes == 40 * GiB for p in decisions.placements for g in p.gpus
    )


def test_fractions_pack_onto_the_shared_gpu_with_least_room():
    decisions = run(
        [node("node-a").gpus(3)],
        [job(1).gpus(0.25)],
        allocations=[
            allocation(10, "node-a", (0, 0.5, 40 * GiB)),
            allocation(11, "node-a", (1, 0.7, 10 * GiB)),
        ],
    )

    assert placed(decisions)[1][1][0].uuid == gpu_uuid("node-a", 1)


def test_gpu_memory_is_respected_for_fractions():
    decisions = run(
        [node("node-a").gpus(1, memory=24 * GiB)],
        [job(1).gpus(0.25).gpu_memory(16 * GiB), job(2).gpus(0.25).gpu_memory(16 * GiB)],
    )

    assert set(placed(decisions)) == {1}
    reason = decisions.pending[2]
    assert reason.code is Reason.INSUFFICIENT_GPU_MEMORY
    assert reason.message == (
        "needs 0.25 of a GPU with 16 GiB free; "
        "the most free on any GPU is 0.75 with 8 GiB on node-a"
    )


def test_gpu_memory_only_request_takes_a_proportional_share():
    decisions = run([node("node-a").gpus(1, memory=40 * GiB)], [job(1).gpu_memory(10 * GiB)])

    assert placed(decisions)[1][1] == (GpuShare(gpu_uuid("node-a", 0), 0.25, 10 * GiB),)


def test_whole_gpu_not_given_where_a_fraction_is_used():
    decisions = run(
        [node("node-a").gpus(2)],
        [job(1).gpus(1)],
        allocations=[allocation(10, "node-a", (0, 0.25, 20 * GiB))],
    )

    assert placed(decisions)[1][1][0].uuid == gpu_uuid("node-a", 1)


def test_fraction_not_put_on_a_gpu_held_whole():
    decisions = run(
        [node("node-a").gpus(1)],
        [job(1).gpus(0.5)],
        allocations=[allocation(10, "node-a", (0, 1.0, 80 * GiB))],
    )

    assert decisions.placements == []
    assert decisions.pending[1].code is Reason.INSUFFICIENT_GPUS
    assert decisions.pending[1].message == "needs 0.5 of a GPU; every GPU is fully used"


def test_fresh_gpu_for_a_fraction_comes_from_the_node_with_fewest_free():
    decisions = run(
        [node("node-a").gpus(4), node("node-b").gpus(2)],
        [job(1).gpus(0.5)],
    )

    assert placed(decisions)[1][0] == "node-b"


def test_four_gpu_job_waits_when_only_two_are_free():
    decisions = run(
        [node("node-a").gpus(4), node("node-b").gpus(2)],
        [job(1).gpus(4)],
        allocations=[allocation(10, "node-a", (0, 1.0, 80 * GiB), (1, 1.0, 80 * GiB))],
    )

    reason = decisions.pending[1]
    assert reason.code is Reason.INSUFFICIENT_GPUS
    assert reason.message == "needs 4 GPUs on one node; the largest free block is 2 on node-a"
    assert reason.position == 1


def test_multi_gpu_job_goes_to_the_best_fitting_node_in_index_order():
    # best fit; the product's packing weighs the workload too (test_packing.py)
    decisions = run(
        [node("node-a").gpus(8), node("node-b").gpus(4), node("node-c").gpus(2)],
        [job(1).gpus(2), job(2).gpus(3)],
        policy=BEST_FIT,
    )

    jobs = placed(decisions)
    assert jobs[1][0] == "node-c"
    assert jobs[2][0] == "node-b"
    assert [g.uuid for g in jobs[2][1]] == [gpu_uuid("node-b", i) for i in range(3)]


def test_whole_gpus_need_enough_memory_each():
    decisions = run(
        [node("node-a").gpus(2, memory=40 * GiB), node("node-b").gpus(2, memory=80 * GiB)],
        [job(1).gpus(2).gpu_memory(80 * GiB)],
    )

    assert placed(decisions)[1][0] == "node-b"


def test_priority_then_submit_order_within_a_team():
    decisions = run(
        [node("node-a").gpus(2)],
        [
            job(1).submitted(10),
            job(2).priority(5).submitted(30),
            job(3).submitted(5),
            job(4).submitted(5),
        ],
    )
    order = [p.job_id for p in decisions.placements]
    assert order == [2, 3, 4, 1]


def test_priority_decides_who_gets_the_last_gpu():
    decisions = run(
        [node("node-a").gpus(1)],
        [job(1).gpus(1).submitted(1), job(2).gpus(1).priority(10).submitted(2)],
    )

    assert set(placed(decisions)) == {2}
    assert decisions.pending[1].position == 2


def test_round_robin_across_teams():
    jobs = [job(i).team("team-a").gpus(1) for i in range(1, 4)]
    jobs += [job(i).team("team-b").gpus(1) for i in range(11, 14)]
    decisions = run([node("node-a").gpus(4)], jobs)

    assert [p.job_id for p in decisions.placements] == [1, 11, 2, 12]
    assert {j: r.position for j, r in decisions.pending.items()} == {3: 3, 13: 3}


def test_best_effort_fifo_a_big_job_does_not_block_small_ones():
    decisions = run(
        [node("node-a").gpus(2)],
        [job(1).gpus(2).priority(5), job(2).gpus(2).priority(5), job(3).gpus(0.5)],
    )

    assert set(placed(decisions)) == {1}
    assert decisions.pending[2].code is Reason.INSUFFICIENT_GPUS

    decisions = run(
        [node("node-a").gpus(2)],
        [job(1).gpus(4).priority(5), job(2).gpus(1)],
    )
    assert set(placed(decisions)) == {2}
    assert decisions.pending[1].code is Reason.NO_NODE_BIG_ENOUGH


def test_cpu_limit():
    decisions = run(
        [node("node-a").gpus(2).cpus(8)],
        [job(1).gpus(1).cpus(6), job(2).gpus(1).cpus(4)],
    )

    assert set(placed(decisions)) == {1}
    reason = decisions.pending[2]
    assert reason.code is Reason.INSUFFICIENT_CPU
    assert reason.message == (
        f"needs 4 CPUs; the most free on a node with room for its GPUs is 2 on node-a; {CPU_HINT}"
    )


def test_memory_limit():
    decisions = run(
        [node("node-a").memory(64 * GiB)],
        [job(1).memory(48 * GiB), job(2).memory(32 * GiB)],
    )

    assert set(placed(decisions)) == {1}
    reason = decisions.pending[2]
    assert reason.code is Reason.INSUFFICIENT_MEMORY
    assert reason.message == (
        "needs 32 GiB of memory; the most free on a node with room for its CPUs is 16 GiB on node-a"
        f"; {MEMORY_HINT}"
    )


def test_cpu_only_job_prefers_a_node_without_free_gpus():
    decisions = run([node("node-a").gpus(2), node("node-b")], [job(1).cpus(4)])

    assert placed(decisions) == {1: ("node-b", ())}


def test_allocations_count_against_cpus_and_memory():
    decisions = run(
        [node("node-a").gpus(3).cpus(9).memory(32 * GiB)],
        [job(1).gpus(1).cpus(2), job(2).gpus(1).memory(16 * GiB)],
        allocations=[allocation(10, "node-a", (0, 1.0, 80 * GiB), cpus=6, memory=24 * GiB)],
    )

    assert set(placed(decisions)) == {1}
    assert decisions.pending[2].code is Reason.INSUFFICIENT_MEMORY
    assert decisions.pending[2].message == (
        "needs 16 GiB of memory; the most free on a node with room for its GPUs and CPUs is 8 GiB"
        f" on node-a; {MEMORY_HINT}"
    )


def test_unschedulable_nodes_are_skipped():
    decisions = run(
        [node("node-a").gpus(8).unschedulable(), node("node-b").gpus(1)],
        [job(1).gpus(1), job(2).gpus(1), job(3).gpus(2)],
    )

    assert placed(decisions) == {1: ("node-b", (GpuShare(gpu_uuid("node-b", 0), 1.0, 80 * GiB),))}
    assert decisions.pending[2].code is Reason.INSUFFICIENT_GPUS
    assert decisions.pending[3].code is Reason.NO_NODE_BIG_ENOUGH
    assert decisions.pending[3].message == (
        "needs 2 GPUs on one node; the largest node has 1 GPU (node-b)"
    )


def test_no_schedulable_nodes():
    decisions = run([node("node-a").gpus(8).unschedulable()], [job(1).gpus(1), job(2)])

    assert {r.code for r in decisions.pending.values()} == {Reason.NO_NODES}
    assert decisions.placements == []


def test_allocations_on_unknown_nodes_and_gpus_are_ignored():
    decisions = run(
        [node("node-a").gpus(1)],
        [job(1).gpus(1)],
        allocations=[allocation(10, "gone", (0, 1.0, 80 * GiB)), allocation(11, "node-a")],
    )

    assert set(placed(decisions)) == {1}


def test_same_input_gives_the_same_decisions():
    nodes = [node(f"node-{i}").gpus(i % 4 + 1).cpus(16) for i in range(6)]
    jobs = [
        job(i).team(f"team-{i % 3}").gpus([1, 0.5, 2, 0.25, 3][i % 5]).priority(i % 2)
        for i in range(40)
    ]
    snap = snapshot(nodes, jobs)

    first = schedule(snap, ManualClock())
    second = schedule(snap, ManualClock(5_000.0))
    reversed_input = schedule(snapshot(reversed(nodes), reversed(jobs)), ManualClock())

    assert first == second
    assert first == reversed_input
    assert list(first.pending) == list(reversed_input.pending)


# -- bounded work per cycle ------------------------------------------------------------------------


# Bounded work per cycle: a cycle hands its caller each ``Policy.max_starts`` jobs it has
# started (or preempted for) as it goes, deciding the same; ``Policy.max_tries`` stops trying a
# user's jobs after that many of them could not start.

EIGHT = [gpu_node("node-a", 8)]


def handed(snapshot: Snapshot) -> tuple[list[Decisions], Decisions]:
    """A cycle with a hand-over: what it handed over as it went, and what it returned."""
    parts: list[Decisions] = []
    return parts, schedule(snapshot, ManualClock(NOW), hand_over=parts.append)


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
