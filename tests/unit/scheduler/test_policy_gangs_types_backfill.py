"""Gangs, GPU types, EASY backfill reservations, connectivity domains and the strict queues
of the baseline policies."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.support.scheduling import (
    NOW,
    codes,
    decide,
    gpu_node,
    gpu_uuid,
    pending,
    placed_ids,
    policy,
    quota,
    running,
    victims,
)

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.scheduler.types import Decisions
from gpupool.sim.engine import cluster, simulate
from gpupool.sim.policies import named
from gpupool.sim.traces import TraceJob

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def gpus_of(decisions: Decisions) -> dict[tuple[int, int], tuple[str, list[str]]]:
    """(job, task) -> (node, GPU uuids)."""
    return {
        (p.job_id, p.task): (p.node, [part.uuid for part in p.gpus]) for p in decisions.placements
    }


# -- gangs -----------------------------------------------------------------------------------


def test_a_gang_of_three_2_gpu_tasks_spans_two_4_gpu_nodes():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3)])

    placed = gpus_of(decisions)
    assert sorted(placed) == [(1, 0), (1, 1), (1, 2)]
    assert {node for node, _ in placed.values()} == {"node-a", "node-b"}
    uuids = [uuid for _, gpus in placed.values() for uuid in gpus]
    assert len(uuids) == len(set(uuids)) == 6
    assert all(len(gpus) == 2 for _, gpus in placed.values())
    assert decisions.pending == {}


def test_a_gang_that_does_not_fit_whole_starts_no_task():
    # one GPU busy on each node: each node has room for one task of 2, the gang needs 3
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [
        running(100, "node-a", [0], preemptible=False),
        running(101, "node-b", [0], preemptible=False),
    ]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3), pending(2, gpus=1)], held)

    assert placed_ids(decisions) == {2}
    reason = decisions.pending[1]
    assert reason.position == 1
    assert "gang: all 3 tasks must start together" in reason.blockers
    # the capacity the gang tried and gave back is there for the job behind it
    assert len(decisions.placements) == 1


def test_a_gang_uses_a_third_node_when_two_are_not_enough():
    # each node holds one task of 3 GPUs
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4), gpu_node("node-c", 4)]
    held = [running(100, "node-a", [0], preemptible=False), running(101, "node-b", [0])]

    decisions = decide(nodes, [pending(1, gpus=3, tasks=3)], held)

    assert {node for node, _ in gpus_of(decisions).values()} == {"node-a", "node-b", "node-c"}


def test_a_gang_reclaims_whole_spots_for_all_its_tasks():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [running(100 + i, "node-a", [i]) for i in range(4)]
    held += [running(110 + i, "node-b", [i]) for i in range(4)]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3)], held, [quota("a", 6)])

    # node-a frees two spots of 2, node-b one
    assert sorted(victims(decisions)) == [100, 101, 102, 103, 110, 111]
    assert set(victims(decisions).values()) == {1}
    assert codes(decisions) == {1: "Preempting"}


def test_a_gang_that_does_not_fit_says_what_it_lacks():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [
        running(100, "node-a", [0], preemptible=False),
        running(101, "node-b", [0], preemptible=False),
    ]

    decisions = decide(nodes, [pending(1, gpus=2, tasks=3)], held)

    reason = decisions.pending[1]
    assert reason.code is not Reason.QUEUED
    assert "was not placed in this cycle" not in reason.message


def test_a_gang_larger_than_the_pool_is_refused_at_submit():
    # 4 GPUs on one 2-GPU node become a gang of two 2-GPU tasks, which one node cannot hold
    trace = [TraceJob(1, 0.0, 5.0, "a", "a", ResourceRequest(gpus=4))]

    result = simulate(trace, cluster("1x2"))

    [refused] = result.unscheduled
    assert "was not placed in this cycle" not in refused.reason


# -- GPU types -------------------------------------------------------------------------------


TYPED_POOL = [gpu_node("node-a", 2, A100), gpu_node("node-b", 2, H100)]


def test_a_job_runs_on_a_gpu_of_its_type_matched_case_insensitively_in_part():
    decisions = decide(
        TYPED_POOL, [pending(1, gpu_types=("a100",)), pending(2, gpu_types=("H100",))]
    )

    assert gpus_of(decisions) == {
        (1, 0): ("node-a", [gpu_uuid("node-a", 0)]),
        (2, 0): ("node-b", [gpu_uuid("node-b", 0)]),
    }


def test_any_of_several_types_will_do():
    held = [running(100, "node-a", [0, 1], preemptible=False)]

    decisions = decide(TYPED_POOL, [pending(1, gpus=2, gpu_types=("v100", "h100"))], held)

    assert gpus_of(decisions) == {(1, 0): ("node-b", [gpu_uuid("node-b", i) for i in (0, 1)])}


def test_a_type_the_pool_lacks_is_no_gpu_of_type():
    decisions = decide(TYPED_POOL, [pending(1, gpu_types=("V100",))])

    reason = decisions.pending[1]
    assert reason.code is Reason.NO_GPU_OF_TYPE
    assert reason.message == (f"no GPU in the pool is of type V100 (models here: {A100}, {H100})")
    assert reason.blockers == ("GPU type: only V100",)


def test_a_type_the_pool_has_but_is_busy_waits_for_gpus():
    held = [running(100, "node-b", [0, 1], preemptible=False)]

    decisions = decide(TYPED_POOL, [pending(1, gpu_types=("h100",))], held)

    assert codes(decisions) == {1: "InsufficientGpus"}


def test_a_typed_job_takes_victims_only_on_gpus_of_its_type():
    held = [
        running(100 + i, node, [i % 2]) for i, node in enumerate(["node-a"] * 2 + ["node-b"] * 2)
    ]

    for types, victim in ((("h100",), {102, 103}), (("a100",), {100, 101})):
        decisions = decide(TYPED_POOL, [pending(1, gpu_types=types)], held, [quota("a", 2)])

        assert len(decisions.preemptions) == 1
        assert set(victims(decisions)) <= victim


def test_a_gang_of_one_type_uses_only_those_nodes():
    nodes = [gpu_node("node-a", 4, A100), gpu_node("node-b", 4, H100), gpu_node("node-c", 4, A100)]

    decisions = decide(nodes, [pending(1, gpus=4, tasks=2, gpu_types=("a100",))])

    assert sorted(node for node, _ in gpus_of(decisions).values()) == ["node-a", "node-c"]


# -- backfill --------------------------------------------------------------------------------


def backfill_pool(gpus: int = 4):
    """node-a: job 100 holds GPUs 0-1 until NOW + 1,000; job 101 holds GPU 2 with no known
    end; the others are free."""
    nodes = [gpu_node("node-a", gpus)]
    held = [
        running(100, "node-a", [0, 1], preemptible=False, started_at=NOW - 100, max_runtime=1_100),
        running(101, "node-a", [2], preemptible=False),
    ]
    return nodes, held


def test_a_blocked_job_reserves_the_node_that_frees_first_and_says_when():
    nodes, held = backfill_pool()

    decisions = decide(nodes, [pending(1, gpus=3)], held)

    reason = decisions.pending[1]
    assert reason.eta == NOW + 1_000
    assert "reservation: node-a is held for it from 1970-01-02 04:03:20 UTC" in reason.blockers


def test_a_later_job_without_a_max_runtime_may_not_take_the_reserved_gpus():
    nodes, held = backfill_pool()

    decisions = decide(nodes, [pending(1, gpus=3), pending(2)], held)

    reason = decisions.pending[2]
    assert reason.code is Reason.RESERVED
    assert reason.message == (
        "it fits on node-a, but those GPUs are reserved for job 1 from 1970-01-02 04:03:20 UTC; "
        "with a --max-runtime that ends before then it could start now"
    )


def test_a_later_job_that_ends_before_the_reservation_starts_now():
    nodes, held = backfill_pool()

    decisions = decide(nodes, [pending(1, gpus=3), pending(2, max_runtime=500.0)], held)

    assert placed_ids(decisions) == {2}


def test_a_later_job_that_ends_after_the_reservation_is_reserved():
    nodes, held = backfill_pool()

    decisions = decide(nodes, [pending(1, gpus=3), pending(2, max_runtime=5_000.0)], held)

    assert codes(decisions) == {1: "InsufficientGpus", 2: "Reserved"}


def test_a_later_job_that_leaves_enough_gpus_starts_now():
    # 6 GPUs: 3 free now, 2 more at NOW + 1,000; job 1 needs 4. Job 2 leaves 2 + 2; job 3
    # would leave 1 + 2.
    nodes, held = backfill_pool(6)

    decisions = decide(nodes, [pending(1, gpus=4), pending(2), pending(3)], held)

    assert placed_ids(decisions) == {2}
    assert codes(decisions) == {1: "InsufficientGpus", 3: "Reserved"}


def test_jobs_of_other_teams_respect_the_reservation_too():
    nodes, held = backfill_pool()

    decisions = decide(nodes, [pending(1, gpus=3), pending(2, team="c")], held)

    assert codes(decisions)[2] == "Reserved"


def test_only_the_first_blocked_job_of_a_team_reserves():
    nodes = [gpu_node("node-a", 4), gpu_node("node-b", 4)]
    held = [
        running(100, "node-a", [0, 1, 2], preemptible=False, started_at=NOW, max_runtime=1_000),
        running(101, "node-b", [0, 1, 2], preemptible=False, started_at=NOW, max_runtime=2_000),
    ]
    jobs = [pending(1, gpus=4), pending(2, gpus=4), pending(3, team="c", gpus=4)]

    decisions = decide(nodes, jobs, held)

    etas = {job_id: reason.eta for job_id, reason in decisions.pending.items()}
    assert etas == {1: NOW + 1_000, 2: None, 3: NOW + 2_000}


def test_without_backfill_a_later_job_takes_the_free_gpu():
    nodes, held = backfill_pool()

    decisions = decide(
        nodes, [pending(1, gpus=3), pending(2)], held, settings=policy(backfill=False)
    )

    assert placed_ids(decisions) == {2}
    assert decisions.pending[1].eta is None


def test_no_reservation_without_a_known_end():
    nodes = [gpu_node("node-a", 4)]
    held = [running(100, "node-a", [0, 1, 2], preemptible=False)]

    decisions = decide(nodes, [pending(1, gpus=4), pending(2)], held)

    assert placed_ids(decisions) == {2}
    assert decisions.pending[1].eta is None


def test_a_reservation_does_not_depend_on_the_order_of_the_allocations():
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 2)]
    held = [
        running(100, "node-a", [0], preemptible=False, max_runtime=3_600),
        running(101, "node-b", [0], preemptible=False, max_runtime=3_600),
    ]
    jobs = [pending(1, gpus=2), pending(2)]

    first = decide(nodes, jobs, held)
    reversed_ = decide(nodes, jobs, held[::-1])

    assert first == reversed_


def test_a_job_kept_off_a_reserved_spot_still_reclaims_its_guarantee_elsewhere():
    # c's 2-GPU T4 job reserves node-t (one GPU free, one freeing at NOW + 3,540); z is
    # guaranteed 2 and holds nothing, while b borrows both A100s of node-a
    nodes = [gpu_node("node-t", 2, "Tesla T4"), gpu_node("node-a", 2, A100)]
    held = [
        running(100, "node-t", [0], team="d", preemptible=False, max_runtime=3_600),
        running(101, "node-a", [0], team="b"),
        running(102, "node-a", [1], team="b"),
    ]
    jobs = [pending(1, team="c", gpus=2, gpu_types=("t4",)), pending(2, team="z")]

    decisions = decide(nodes, jobs, held, [quota("c", 1), quota("z", 2)])

    assert codes(decisions)[2] == "Preempting"


def test_the_reserved_reason_names_the_reservation_the_job_is_kept_off():
    nodes = [gpu_node("node-t", 2, "Tesla T4"), gpu_node("node-a", 2, A100)]
    held = [
        running(100, "node-t", [0], team="d", preemptible=False, started_at=NOW, max_runtime=1_000),
        running(101, "node-a", [0], team="d", preemptible=False, started_at=NOW, max_runtime=2_000),
    ]
    jobs = [
        pending(1, team="b", gpus=2, gpu_types=("t4",)),
        pending(2, team="c", gpus=2, gpu_types=("a100",)),
        pending(3, team="e", gpu_types=("a100",)),  # fits only on node-a, held for job 2
    ]

    decisions = decide(nodes, jobs, held)

    reason = decisions.pending[3]
    assert reason.code is Reason.RESERVED
    assert reason.message.startswith(  # job 2 is team c's: team e is told the team only
        "it fits on node-a, but those GPUs are reserved for a job of team c from"
    )


# -- connectivity domains ----------------------------------------------------------------------


def domain_pool(domains, busy=(0, 1)):
    nodes = [gpu_node("node-a", len(domains), domains=domains)]
    return nodes, [running(100, "node-a", list(busy), preemptible=False)]


@pytest.mark.parametrize(
    ("gpus", "chosen"),
    [
        (2, [2, 3]),  # domain 0 has exactly 2 free: the best fit
        (3, [4, 5, 6]),  # only domain 1 has 3
        (4, [4, 5, 6, 7]),
        (5, [2, 4, 5, 6, 7]),  # no domain has 5: the fewest domains, the largest first
    ],
)
def test_a_multi_gpu_task_gets_gpus_of_one_domain_when_one_has_enough(gpus, chosen):
    nodes, held = domain_pool([0, 0, 0, 0, 1, 1, 1, 1])

    decisions = decide(nodes, [pending(1, gpus=gpus)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", i) for i in chosen]


def test_the_smallest_domain_that_suffices_is_used():
    nodes, held = domain_pool([0, 0, 1, 1, 1, 1, 2, 2], busy=(0,))

    decisions = decide(nodes, [pending(1, gpus=2)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", 6), gpu_uuid("node-a", 7)]


@pytest.mark.parametrize("gpus", [1, 0.5])
def test_one_gpu_goes_to_the_fullest_domain(gpus):
    # domain 0 has 4 free GPUs, domain 1 one: a 1-GPU task (or a fraction) takes that one
    nodes, held = domain_pool([0, 0, 0, 0, 1, 1, 1, 1], busy=(4, 5, 6))

    decisions = decide(nodes, [pending(1, gpus=gpus)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", 7)]


def test_domains_keep_large_blocks_for_large_jobs():
    nodes, held = domain_pool([0, 0, 0, 0, 1, 1, 1, 1], busy=(0, 1))

    decisions = decide(nodes, [pending(1, gpus=2), pending(2, gpus=4)], held)

    assert gpus_of(decisions)[(1, 0)][1] == [gpu_uuid("node-a", 2), gpu_uuid("node-a", 3)]
    assert gpus_of(decisions)[(2, 0)][1] == [gpu_uuid("node-a", i) for i in (4, 5, 6, 7)]


# -- the baselines' strict queues ----------------------------------------------------------


def strict(name: str):
    return replace(named(name), explain=True)


STRICT_POOL = [gpu_node("node-a", 2)]
STRICT_HELD = [running(100, "node-a", [0], team="c", preemptible=False)]
STRICT_JOBS = [
    pending(1, gpus=2, team="a"),
    pending(2, team="a"),
    pending(3, team="b"),
]


def test_fifo_blocks_every_job_behind_a_head_that_does_not_fit():
    decisions = decide(STRICT_POOL, STRICT_JOBS, STRICT_HELD, settings=named("fifo"))

    assert decisions.placements == []
    assert decisions.preemptions == []


def test_drf_blocks_the_teams_queue_behind_its_head_only():
    decisions = decide(STRICT_POOL, STRICT_JOBS, STRICT_HELD, settings=named("drf"))

    assert placed_ids(decisions) == {3}


def test_the_default_policy_lets_smaller_jobs_pass_a_blocked_head():
    decisions = decide(STRICT_POOL, STRICT_JOBS, STRICT_HELD)

    assert placed_ids(decisions) == {2}


def test_drf_explains_the_jobs_of_other_users_behind_a_blocked_head():
    jobs = [pending(1, gpus=2), pending(2, user="bob"), pending(3, team="b")]

    decisions = decide(STRICT_POOL, jobs, STRICT_HELD, settings=strict("drf"))

    assert decisions.pending[2].code is Reason.QUEUED
    assert decisions.pending[2].message == "waits behind job 1, which does not fit yet"


@pytest.mark.parametrize("name", ["fifo", "drf"])
def test_strict_queues_explain_every_job_behind_a_blocked_head(name):
    decisions = decide(STRICT_POOL, STRICT_JOBS, STRICT_HELD, settings=strict(name))

    assert placed_ids(decisions) | set(decisions.pending) == {1, 2, 3}
    assert decisions.pending[2].code is Reason.QUEUED
    assert decisions.pending[2].message == "waits behind job 1, which does not fit yet"
