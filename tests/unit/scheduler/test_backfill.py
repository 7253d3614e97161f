"""EASY backfill reservations (``backfill``)."""

from __future__ import annotations

from gpupool.domain.jobs import Reason
from tests.support.scheduling import (
    A100,
    NOW,
    codes,
    decide,
    gpu_node,
    pending,
    placed_ids,
    policy,
    quota,
    running,
)

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
