"""What a cycle learns cannot start (``scheduler.memo``), and the sleeping teams it lets the
cycle pass over without trying their jobs."""

from __future__ import annotations

from unittest.mock import patch

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler import schedule
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.fit import demand_of
from gpupool.scheduler.memo import INFINITY, Frontier, Group, NoRoom, NoVictims, sizes_of
from gpupool.scheduler.types import Snapshot
from tests.support.clock import ManualClock
from tests.support.scheduling import NOW, gpu_node, pending, quota, running


def test_a_frontier_keeps_only_the_least_failures():
    frontier = Frontier()
    frontier.add((1,), (4, 8))
    frontier.add((1,), (2, 8))  # covers the first: it goes
    frontier.add((0,), (8, 1))  # neither covers the other
    frontier.add((2,), (8, 8))  # covered: not kept

    assert sorted(frontier.entries) == [((0,), (8, 1)), ((1,), (2, 8))]
    assert frontier.covers((1,), (2, 9))
    assert frontier.covers((5,), (8, 1))
    assert not frontier.covers((0,), (2, 8))  # a better order than any failure like it
    assert not frontier.covers((3,), (1, 9))  # asks less than any failure


def test_no_room_covers_a_group_asking_no_less_and_ending_no_sooner():
    memo = NoRoom()
    job = pending(1, gpus=2, max_runtime=600.0)
    memo.add(job, demand_of(job.request))
    bigger = demand_of(pending(2, gpus=4).request)

    assert memo.covers_group(Group(((), 1, 2), sizes_of(bigger), INFINITY))
    assert memo.covers_group(Group(((), 1, 2), sizes_of(bigger), 600.0))
    # a job ending sooner may use a reserved node the failed one could not
    assert not memo.covers_group(Group(((), 1, 2), sizes_of(bigger), 300.0))
    smaller = demand_of(pending(3, gpus=1).request)
    assert not memo.covers_group(Group(((), 1, 2), sizes_of(smaller), INFINITY))
    assert not memo.covers_group(Group((("A100",), 1, 2), sizes_of(bigger), INFINITY))
    memo.clear()
    assert not memo.covers_group(Group(((), 1, 2), sizes_of(bigger), INFINITY))


def test_no_victims_covers_a_group_of_the_same_team_at_no_better_a_rank():
    memo = NoVictims()
    job = pending(1, team="a", gpus=1)
    demand = demand_of(job.request)
    memo.add(job, (0, 1), demand)
    group = Group(((), 1, 2), sizes_of(demand), INFINITY)

    assert memo.covers(pending(2, team="a", gpus=2), (0, 1), demand_of(pending(2, gpus=2).request))
    assert memo.covers_group("a", group, (0, 1))
    assert memo.covers_group("a", group, (0, 2))
    assert not memo.covers_group("a", group, (0, 0))  # it outranks more running jobs
    assert not memo.covers_group("b", group, (0, 1))


def counting_tries(snapshot: Snapshot) -> tuple[int, object]:
    tried: list[int] = []
    consider = Cycle.consider

    def counted(self, queued, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        tried.append(queued.job.job_id)
        return consider(self, queued, *args, **kwargs)

    with patch.object(Cycle, "consider", counted):
        decisions = schedule(snapshot, ManualClock(NOW))
    return len(tried), decisions


def test_a_team_none_of_whose_jobs_can_start_sleeps_and_its_jobs_are_not_tried():
    # the pool is full of non-preemptible work; team a's 40 jobs of 2 and 1 GPUs can neither
    # fit nor preempt: its first job (2 GPUs) finds neither, then its second (1 GPU, the
    # least it asks); the other 38 are not tried
    nodes = (gpu_node("node-a", 2), gpu_node("node-b", 4))
    held = tuple(running(100 + i, "node-a", [i], team="b", preemptible=False) for i in range(2))
    held += tuple(running(200 + i, "node-b", [i], team="b", preemptible=False) for i in range(4))
    jobs = tuple(pending(i, team="a", gpus=1 + i % 2) for i in range(1, 41))
    snapshot = Snapshot(nodes, held, jobs, (quota("a", 2),), policy=DEFAULT_POLICY)

    tries, decisions = counting_tries(snapshot)

    assert tries == 2
    assert decisions.placements == []
    assert set(decisions.pending) == {job.job_id for job in jobs}  # each still explained
    assert {reason.code.value for reason in decisions.pending.values()} == {"InsufficientGpus"}


def test_a_team_with_a_smaller_job_left_stays_awake():
    # team a's first job asks 2 GPUs and finds no room; its 1-GPU job later in its queue might
    # fit, so the team is not put to sleep and that job starts
    nodes = (gpu_node("node-a", 2),)
    held = (running(100, "node-a", [0], team="b", preemptible=False),)
    jobs = (
        pending(1, team="a", gpus=2, priority=1),
        *(pending(i, team="a", gpus=2) for i in range(2, 6)),
        pending(6, team="a", gpus=1),
    )
    snapshot = Snapshot(nodes, held, jobs, (quota("a", 2),), policy=DEFAULT_POLICY)

    tries, decisions = counting_tries(snapshot)

    assert tries == 6
    assert {placement.job_id for placement in decisions.placements} == {6}
