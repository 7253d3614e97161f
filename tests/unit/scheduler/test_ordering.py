"""The order in which pending jobs are tried (``ordering``): the users' queues kept from one
cycle to the next, and the strict queues of the baseline policies."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import GiB
from gpupool.scheduler import SchedulerState
from gpupool.scheduler.fit import DemandCache
from gpupool.scheduler.ledger import Ledger, waiting_by_team
from gpupool.scheduler.memo import groups_of
from gpupool.scheduler.ordering import KeptOrder, Queues, leased_order
from gpupool.scheduler.types import PendingJob
from gpupool.sim.policies import named
from tests.support.scheduling import (
    decide,
    gpu_node,
    pending,
    placed_ids,
    running,
)
from tests.unit.scheduler.test_policy_properties import SETTINGS

MEMORIES = st.sampled_from((10 * GiB, 30 * GiB, 100 * GiB))
STARVING = replace(DEFAULT_POLICY, starvation_factor=2.0, starvation_min_wait=100.0)
POLICIES = (STARVING, DEFAULT_POLICY, replace(DEFAULT_POLICY, order="fifo"))


def anew(jobs: tuple[PendingJob, ...], policy: Policy, now: float) -> tuple[dict, dict]:
    """Each user's queue and the jobs' levels as a cycle sorts them anew."""
    queues = Queues(jobs, Ledger((), (), jobs, 8.0), policy, now, {}, {}, {})
    lists = {
        (team, user.user): [entry[1] for entry in user.jobs]
        for team, queue in queues.teams.items()
        for user in queue.users
    }
    return lists, queues.levels


def kept_lists(kept: KeptOrder) -> dict:
    return {where: [entry[1] for entry in entries] for where, entries in kept.lists.items()}


@st.composite
def job(draw, job_id: int) -> PendingJob:
    made = pending(
        job_id,
        team=draw(st.sampled_from("ab")),
        user=draw(st.sampled_from(("u1", "u2", None))),
        priority=draw(st.sampled_from((0, 0, 5))),
        submitted=draw(st.sampled_from((0.0, 10.0, float(job_id)))),
        attained=draw(st.sampled_from((0.0, 0.0, 2_000.0, 50_000.0))),
    )
    if draw(st.booleans()):  # requeued after a preemption: it waits from then on
        made = replace(made, queued_at=draw(st.floats(0.0, 500.0)))
    asks = draw(st.sampled_from(("gpus", "gpus", "memory", "none")))
    if asks == "memory":  # a share of a GPU, by its memory: depends on the pool's GPUs
        made = replace(made, request=ResourceRequest(gpu_memory_bytes=draw(MEMORIES)))
    elif asks == "none":
        made = replace(made, request=ResourceRequest(cpus=1.0))
    elif draw(st.booleans()):
        made = replace(made, request=ResourceRequest(gpus=draw(st.sampled_from((0.3, 0.5, 2)))))
    return made


@st.composite
def histories(draw) -> tuple[Policy, list[tuple[tuple[PendingJob, ...], float]]]:
    """A policy and the pending jobs and clock of a few cycles in a row: jobs come, go,
    and come back as new job objects (requeued with more service); time goes on, mostly
    forward, past some starvation times, and once in a while back."""
    policy = draw(st.sampled_from(POLICIES))
    present: dict[int, PendingJob] = {}
    cycles = []
    now = 0.0
    for _ in range(draw(st.integers(1, 6))):
        for job_id in draw(st.lists(st.integers(1, 12), max_size=6)):
            if job_id in present and draw(st.booleans()):
                del present[job_id]  # started, or cancelled
            else:
                present[job_id] = draw(job(job_id))  # come, or requeued as another object
        now = draw(st.sampled_from((now, now + 1.0, now + 150.0, now + 5_000.0, now / 2)))
        cycles.append((tuple(present.values()), now))
    return policy, cycles


def summed(groups) -> set:  # noqa: ANN001
    return {(group.key, group.least, group.runtime) for group in groups}


@SETTINGS
@given(histories(), st.integers(0, 8))
def test_the_kept_queues_are_those_sorted_anew(history, tried: int):
    policy, cycles = history
    kept = KeptOrder(policy, SchedulerState())
    for jobs, now in cycles:
        kept.update(jobs, now)
        lists, levels = anew(jobs, policy, now)
        assert kept_lists(kept) == lists
        assert kept.levels == levels
        for memories in ([], [40 * GiB, 80 * GiB]):  # what the ledger is told is waiting
            assert kept.waiting(memories) == waiting_by_team(jobs, memories)
        # a cycle over the kept queues: the groups of each team's jobs left, after a few
        # were handed out, are those of the jobs left
        queues = Queues(jobs, Ledger((), (), jobs, 8.0), policy, now, {}, {}, {}, kept)
        for _, _ in zip(range(tried), queues, strict=False):
            pass
        demands = DemandCache()
        for team in queues.teams:
            left = groups_of(queues.left(team), demands, SchedulerState())
            assert summed(queues.groups_left(team, demands)) == summed(left)


def test_a_job_starves_in_the_kept_queues_when_its_time_comes():
    served = pending(1, attained=50_000.0, submitted=0.0)  # level 2: waits behind the others
    fresh = pending(2, submitted=10.0)
    kept = KeptOrder(STARVING, SchedulerState())
    kept.update((served, fresh), 10.0)
    assert kept_lists(kept) == {("a", "a-user"): [fresh, served]}
    assert kept.levels == {1: 2}
    kept.update((served, fresh), 100_000.0)  # waited twice its 50,000 GPU-seconds
    assert kept_lists(kept) == {("a", "a-user"): [served, fresh]}
    assert kept.levels == {}


def test_the_heap_of_starving_jobs_forgets_jobs_gone():
    kept = KeptOrder(STARVING, SchedulerState())
    for round_ in range(200):
        kept.update((pending(round_, attained=50_000.0, submitted=0.0),), float(round_))
    assert len(kept.jobs) == 1
    assert len(kept.starving) <= 2 * len(kept.jobs) + 64


def test_srtf_orders_its_own_queues_each_cycle():
    state = SchedulerState()
    with leased_order(state, (pending(1),), replace(DEFAULT_POLICY, order="srtf"), 0.0) as kept:
        assert kept is None


def test_another_policy_keeps_another_order():
    jobs = (pending(1, priority=5), pending(2, priority=0))
    state = SchedulerState()
    with leased_order(state, jobs, DEFAULT_POLICY, 0.0) as first:
        assert first is not None
    assert state.order is first
    fifo = replace(DEFAULT_POLICY, order="fifo")
    with leased_order(state, jobs, fifo, 0.0) as kept:
        assert kept is not first
        assert kept_lists(kept) == {("", ""): [jobs[0], jobs[1]]}  # by submit time


def test_a_cycle_that_fails_leaves_no_order_kept():
    state = SchedulerState()
    with leased_order(state, (pending(1),), DEFAULT_POLICY, 0.0):
        pass
    kept = state.order
    with pytest.raises(RuntimeError), leased_order(state, (pending(1),), DEFAULT_POLICY, 1.0):
        raise RuntimeError("a bug")
    assert kept is not None and state.order is None


def test_jobs_of_one_id_twice_are_ordered_by_the_cycle_itself():
    state = SchedulerState()
    twice = (pending(1), pending(1, priority=5))
    with leased_order(state, twice, DEFAULT_POLICY, 0.0) as kept:
        assert kept is None  # the kept queues tell jobs apart by id
    assert state.order is None


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
