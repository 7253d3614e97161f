"""Nominations (``nominations``): a job that preempts is nominated to the GPUs its victims
free and to those free beside them, keeps them while its victims stop, and loses them when its
node leaves, another job holds them, its time is up or it leaves the queue."""

from __future__ import annotations

from gpupool.domain.jobs import Reason
from gpupool.scheduler import schedule
from gpupool.scheduler.types import NOMINATION_TTL, Decisions, Nomination, Snapshot
from tests.support.clock import ManualClock
from tests.support.scheduling import NOW, codes, gpu_node, pending, quota, running

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


def test_a_nomination_outlives_its_time_while_its_victims_still_stop():
    stopping = [running(100, "node-a", [0, 1, 2, 3], team="b", stopping=True)]
    nominations = {1: Nomination(1, (("node-a", (0, 1, 2, 3)),), NOW - NOMINATION_TTL - 60.0)}

    decisions = cycle(FOUR_GPUS, [pending(1, gpus=4)], stopping, [quota("a", 4)], nominations)

    assert decisions.preemptions == []
    assert decisions.nominations == nominations
