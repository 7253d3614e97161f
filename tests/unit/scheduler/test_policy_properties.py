"""Properties of the scheduling policy over random pools, running work, queues and quotas.

Placement alone is covered by test_scheduler_properties.py (non-preemptible work, no
quotas); here running work carries teams, priorities, service and checkpoints, pending
jobs are gangs, typed, prioritised or non-preemptible, and teams have guarantees, limits
and weights. Every check counts from the snapshot and the decisions on its own, except the
fair shares, which are the ledger's water-fill by definition.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from unittest.mock import patch

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import GiB
from gpupool.scheduler import infeasible_reason, schedule
from gpupool.scheduler.ledger import Ledger, job_gpus
from gpupool.scheduler.ordering import Queues
from gpupool.scheduler.preemption import Preemptor
from gpupool.scheduler.types import (
    Allocation,
    Decisions,
    GpuCapacity,
    GpuShare,
    NodeCapacity,
    PendingJob,
    Snapshot,
    TeamQuota,
)
from gpupool.sim.engine import Replay, cluster, simulate
from gpupool.sim.policies import named
from gpupool.sim.traces import TraceJob
from tests.support.clock import ManualClock
from tests.support.scheduling import NOW, gpu_node, pending, quota, running

EPS = 1e-6
MODELS = {
    "NVIDIA A100-SXM4-80GB": 80 * GiB,
    "NVIDIA H100 80GB HBM3": 80 * GiB,
    "Tesla T4": 16 * GiB,
}
TYPES = [(), (), (), ("a100",), ("H100",), ("t4", "A100"), ("V100",)]
TEAMS = ["a", "b", "c", "d"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- strategies --------------------------------------------------------------------------------


@st.composite
def pools(draw, max_nodes: int = 5) -> tuple[NodeCapacity, ...]:
    nodes = []
    for n in range(draw(st.integers(1, max_nodes))):
        name = f"node-{n}"
        model = draw(st.sampled_from(sorted(MODELS)))
        mixed = draw(st.integers(0, 4)) == 0
        gpus = []
        for i in range(draw(st.integers(1, 8))):
            this = draw(st.sampled_from(sorted(MODELS))) if mixed else model
            domain = draw(st.integers(0, 1))
            gpus.append(GpuCapacity(f"GPU-{name}-{i}", i, this, MODELS[this], domain))
        cpus = draw(st.sampled_from([8.0, 64.0, 64.0]))
        nodes.append(NodeCapacity(name, tuple(gpus), cpus, 512 * GiB))
    return tuple(nodes)


@st.composite
def job_traits(draw) -> dict:
    team = draw(st.sampled_from(TEAMS))
    started = NOW - draw(st.sampled_from([0.0, 30.0, 600.0, 3_600.0, 50_000.0]))
    checkpoint = draw(st.sampled_from([None, 0.1, 0.9]))
    return {
        "team": team,
        "user": f"{team}{draw(st.integers(0, 1))}",
        "priority": draw(st.sampled_from([-1, 0, 0, 1])),
        "preemptible": draw(st.integers(0, 4)) > 0,
        "stopping": draw(st.integers(0, 9)) == 0,
        "started_at": started,
        "attained": draw(st.sampled_from([0.0, 0.0, 2_000.0, 40_000.0, 400_000.0])),
        "checkpoint_at": None if checkpoint is None else started + checkpoint * (NOW - started),
        "max_runtime": draw(st.sampled_from([None, None, 600.0, 7_200.0, 100_000.0])),
    }


@st.composite
def running_work(
    draw, nodes: Sequence[NodeCapacity], one_gpu_jobs: bool = False
) -> tuple[Allocation, ...]:
    """Allocations within capacity: whole GPUs (multi-GPU and multi-node jobs too) and shares.

    ``one_gpu_jobs``: every job holds one whole GPU and is preemptible and not stopping.
    """
    allocations: list[Allocation] = []
    traits: dict[int, dict] = {}
    tasks: dict[int, int] = defaultdict(int)
    whole: set[int] = set()  # jobs holding whole GPUs (the others hold one share)
    next_id = 10_000

    def new_job(**forced) -> int:
        nonlocal next_id
        next_id += 1
        traits[next_id] = draw(job_traits()) | forced
        return next_id

    forced = {"preemptible": True, "stopping": False} if one_gpu_jobs else {}
    for node in nodes:
        cpus_left = node.cpus
        holdings: list[tuple[int, list[GpuShare]]] = []
        for gpu in node.gpus:
            kind = draw(st.sampled_from(["free", "whole", "whole", "shared"]))
            if kind == "free" or (one_gpu_jobs and kind == "shared"):
                continue
            if kind == "whole":
                part = GpuShare(gpu.uuid, 1.0, gpu.memory_bytes)
                last = holdings[-1] if holdings else None
                if not one_gpu_jobs and last and last[0] in whole and draw(st.booleans()):
                    last[1].append(part)  # one more GPU of the previous whole-GPU job
                    continue
                here = {job_id for job_id, _ in holdings}
                whole_jobs = sorted(j for j in whole if tasks[j] and j not in here)
                if not one_gpu_jobs and whole_jobs and draw(st.integers(0, 5)) == 0:
                    job_id = draw(st.sampled_from(whole_jobs))  # a gang task on another node
                else:
                    job_id = new_job(**forced)
                whole.add(job_id)
                holdings.append((job_id, [part]))
                continue
            left = 1.0
            for share in draw(st.lists(st.sampled_from([0.25, 0.5]), min_size=1, max_size=3)):
                if share > left + EPS:
                    break
                left -= share
                part = GpuShare(gpu.uuid, share, int(share * gpu.memory_bytes))
                holdings.append((new_job(), [part]))
        for job_id, parts in holdings:
            cpus = 1.0 if cpus_left >= 1.0 else 0.0
            cpus_left -= cpus
            trait = traits[job_id]
            allocations.append(
                Allocation(job_id, node.name, tuple(parts), cpus, 0, task=tasks[job_id], **trait)
            )
            tasks[job_id] += 1
    return tuple(allocations)


@st.composite
def pending_jobs(draw, count: int) -> tuple[PendingJob, ...]:
    jobs = []
    for job_id in range(1, count + 1):
        team = draw(st.sampled_from(TEAMS))
        gpus = draw(st.sampled_from([None, 0.25, 0.5, 1, 1, 1, 2, 3, 4, 8]))
        tasks = 1
        if gpus is not None and gpus >= 1 and draw(st.integers(0, 3)) == 0:
            tasks = draw(st.integers(2, 3))
        cpus = draw(st.sampled_from([1.0, 1.0, 2.0, 16.0]))
        jobs.append(
            PendingJob(
                job_id,
                team,
                f"{team}{draw(st.integers(0, 1))}",
                draw(st.sampled_from([-1, 0, 0, 1])),
                NOW - draw(st.integers(0, 5_000)),
                ResourceRequest(gpus=gpus, cpus=cpus),
                tasks=tasks,
                preemptible=draw(st.integers(0, 3)) > 0,
                gpu_types=draw(st.sampled_from(TYPES)),
                max_runtime=draw(st.sampled_from([None, None, 300.0, 5_000.0])),
                attained=draw(st.sampled_from([0.0, 0.0, 2_000.0, 40_000.0])),
            )
        )
    return tuple(jobs)


@st.composite
def team_quotas(draw, pool_gpus: int) -> tuple[TeamQuota, ...]:
    quotas = []
    left = pool_gpus
    for team in draw(st.lists(st.sampled_from(TEAMS), unique=True, max_size=4)):
        guarantee = draw(st.integers(0, left))
        left -= guarantee
        key = draw(st.sampled_from(["*", "*", "A100"]))
        limit = draw(st.sampled_from([None, None, 1, 2, 4, pool_gpus]))
        weight = draw(st.sampled_from([0.5, 1.0, 1.0, 2.0]))
        quotas.append(TeamQuota(team, {key: guarantee} if guarantee else {}, limit, weight))
    return tuple(quotas)


POLICIES = [
    DEFAULT_POLICY,
    DEFAULT_POLICY,
    replace(DEFAULT_POLICY, min_runtime=600.0),
    replace(DEFAULT_POLICY, backfill=False),
    replace(DEFAULT_POLICY, las_thresholds=(100.0, 10_000.0)),
]


@st.composite
def snapshots(
    draw, max_nodes: int = 5, jobs: tuple[int, int] = (0, 12), policies: Sequence = POLICIES
) -> Snapshot:
    nodes = draw(pools(max_nodes))
    pool_gpus = sum(len(node.gpus) for node in nodes)
    return Snapshot(
        nodes,
        draw(running_work(nodes)),
        draw(pending_jobs(draw(st.integers(*jobs)))),
        draw(team_quotas(pool_gpus)),
        policy=draw(st.sampled_from(policies)),
    )


# -- helpers -----------------------------------------------------------------------------------


def held(allocation: Allocation | object) -> float:
    return sum(part.share for part in allocation.gpus)


def run_level(allocations: Sequence[Allocation], policy: Policy) -> int:
    """A running job's level: earlier attempts' service plus this attempt's, over all tasks."""
    attained = allocations[0].attained + sum(
        held(a) * max(0.0, NOW - a.started_at) for a in allocations
    )
    return bisect_right(policy.las_thresholds, attained)


def pending_level(job: PendingJob, policy: Policy) -> int:
    return bisect_right(policy.las_thresholds, job.attained)


def by_job(allocations: Sequence[Allocation]) -> dict[int, list[Allocation]]:
    jobs: dict[int, list[Allocation]] = defaultdict(list)
    for allocation in allocations:
        jobs[allocation.job_id].append(allocation)
    return jobs


def team_of_running(allocations: Sequence[Allocation]) -> dict[int, str]:
    return {allocation.job_id: allocation.team for allocation in allocations}


def check_nothing_over_admitted(snapshot: Snapshot, decisions: Decisions) -> None:
    """(a) Existing allocations plus placements fit every GPU, node CPU and node memory."""
    shares: dict[str, list[float]] = defaultdict(list)
    memory: dict[str, int] = defaultdict(int)
    cpus: dict[str, float] = defaultdict(float)
    for holding in (*snapshot.allocations, *decisions.placements):
        cpus[holding.node] += holding.cpus
        for part in holding.gpus:
            shares[part.uuid].append(part.share)
            memory[part.uuid] += part.memory_bytes
    schedulable = {node.name for node in snapshot.nodes if node.schedulable}
    for node in snapshot.nodes:
        assert cpus[node.name] <= node.cpus + EPS
        for gpu in node.gpus:
            assert sum(shares[gpu.uuid]) <= 1 + EPS, gpu.uuid
            assert memory[gpu.uuid] <= gpu.memory_bytes, gpu.uuid
            if any(share >= 1 - EPS for share in shares[gpu.uuid]):
                assert len(shares[gpu.uuid]) == 1, f"{gpu.uuid} is held whole and shared"
    uuids = {gpu.uuid: gpu for node in snapshot.nodes for gpu in node.gpus}
    jobs = {job.job_id: job for job in snapshot.pending}
    for placement in decisions.placements:
        assert placement.node in schedulable
        job = jobs[placement.job_id]
        for part in placement.gpus:
            gpu = uuids[part.uuid]
            assert part.uuid.startswith(f"GPU-{placement.node}-")
            if job.gpu_types:
                model = gpu.model.lower()
                assert any(kind.lower() in model for kind in job.gpu_types), (job, gpu)


def check_limits(snapshot: Snapshot, decisions: Decisions) -> None:
    """(b) A team that places work ends the cycle within its limit.

    Counted from the snapshot: what it held, minus its running jobs preempted now, plus
    its placements (a job waiting for victims is charged too, so its team was within the
    limit when anything was placed).
    """
    limits = {q.team: q.limit for q in snapshot.quotas if q.limit is not None}
    jobs = {job.job_id: job for job in snapshot.pending}
    teams = team_of_running(snapshot.allocations)
    running = by_job(snapshot.allocations)
    total: dict[str, float] = defaultdict(float)
    for allocation in snapshot.allocations:
        total[allocation.team] += held(allocation)
    for preemption in decisions.preemptions:
        total[teams[preemption.job_id]] -= sum(held(a) for a in running[preemption.job_id])
    placed: dict[str, float] = defaultdict(float)
    for placement in decisions.placements:
        placed[jobs[placement.job_id].team] += held(placement)
    for team, gpus in placed.items():
        if team in limits and gpus > 0:
            assert total[team] + gpus <= limits[team] + EPS, (team, total[team], gpus)


def check_gangs(snapshot: Snapshot, decisions: Decisions) -> None:
    """(c) A job starts with all its tasks (numbered 0..n-1, each its full request) or none."""
    jobs = {job.job_id: job for job in snapshot.pending}
    tasks: dict[int, list[int]] = defaultdict(list)
    for placement in decisions.placements:
        job = jobs[placement.job_id]
        tasks[placement.job_id].append(placement.task)
        whole = job.request.whole_gpus
        assert len(placement.gpus) == (whole or (1 if job.request.uses_gpus else 0))
    for job_id, numbers in tasks.items():
        assert sorted(numbers) == list(range(jobs[job_id].tasks)), (job_id, numbers)


def check_preemptions(snapshot: Snapshot, decisions: Decisions) -> None:
    """(d) Victims are preemptible running jobs not already stopping, each named once, for a
    job left waiting (Preempting), and allowed by the rules: inside a team a strictly better
    (priority, level) after ``min_runtime``; across teams only when reclaim is on (the fair
    shares are ``check_fair_shares``)."""
    policy = snapshot.policy
    running = by_job(snapshot.allocations)
    jobs = {job.job_id: job for job in snapshot.pending}
    placed = {placement.job_id for placement in decisions.placements}
    victims = [preemption.job_id for preemption in decisions.preemptions]
    assert len(victims) == len(set(victims)), victims
    for preemption in decisions.preemptions:
        allocations = running[preemption.job_id]
        assert allocations, f"{preemption.job_id} is not running"
        assert preemption.job_id not in placed and preemption.job_id not in jobs
        assert all(a.preemptible for a in allocations), preemption
        assert not any(a.stopping for a in allocations), preemption
        assert preemption.code is Reason.PREEMPTED and preemption.message
        job = jobs[preemption.for_job]
        assert job.job_id not in placed
        reason = decisions.pending[job.job_id]
        assert reason.code is Reason.PREEMPTING
        victim = allocations[0]
        if victim.team == job.team:
            assert str(preemption.job_id) in reason.message
        else:  # another team's victim is counted by its team, never named
            assert f"of team {victim.team}" in reason.message
        if victim.team == job.team:
            assert policy.las_preemption
            assert NOW - victim.started_at >= policy.min_runtime
            mine = (-job.priority, pending_level(job, policy))
            theirs = (-victim.priority, run_level(allocations, policy))
            assert mine < theirs, (job, allocations)
        else:
            assert policy.reclaim


def check_fair_shares(snapshot: Snapshot, decisions: Decisions, floor: bool = True) -> None:
    """(d) Across teams: the preempting team is within its fair share and (``floor``) the
    victim's team keeps at least its fair share (the ledger's water-fill of this snapshot),
    except for a guarantee: a team within its guarantee may take the last victim that leaves
    a team above its guarantee and its fair share below that share (whole jobs and fractional
    shares make an exact floor impossible: test_a_guarantee_is_reclaimable_from_a_single_large_job),
    never more than that victim below. Preemptions are read in the order they were decided:
    a team may lose a job to one team while it stays at its fair share, and then, below it, to
    another team reclaiming its guarantee."""
    running = by_job(snapshot.allocations)
    jobs = {job.job_id: job for job in snapshot.pending}
    placed = {placement.job_id for placement in decisions.placements}
    pool = float(sum(len(node.gpus) for node in snapshot.nodes if node.schedulable))
    fair = Ledger(snapshot.quotas, snapshot.allocations, snapshot.pending, pool).fair
    held_by: dict[str, float] = defaultdict(float)
    for allocation in snapshot.allocations:
        held_by[allocation.team] += held(allocation)
    lost: dict[str, float] = defaultdict(float)  # every victim's GPUs, by the victim's team
    guarantees = {q.team: sum(q.guarantee.values()) for q in snapshot.quotas}
    for preemption in decisions.preemptions:
        victim = running[preemption.job_id]
        lost[victim[0].team] += sum(held(a) for a in victim)
    charged: dict[str, float] = defaultdict(float)  # placed, or waiting for victims
    for job in snapshot.pending:
        reason = decisions.pending.get(job.job_id)
        if job.job_id in placed or (reason is not None and reason.code is Reason.PREEMPTING):
            charged[job.team] += job_gpus(job)
    lost_across: dict[str, float] = defaultdict(float)  # to other teams, so far
    for preemption in decisions.preemptions:
        job = jobs[preemption.for_job]
        victim_team = running[preemption.job_id][0].team
        if victim_team == job.team:
            continue
        gpus = sum(held(a) for a in running[preemption.job_id])
        lost_across[victim_team] += gpus
        # the preempting team was within its fair share when it chose, counting the least
        # it can have held then
        least = held_by[job.team] - lost[job.team]
        assert least + job_gpus(job) <= fair.get(job.team, 0.0) + EPS, (job.team, fair)
        if not floor:
            continue
        # the victim's team held at least its fair share after this loss
        most = held_by[victim_team] + charged[victim_team] - lost_across[victim_team]
        if most >= fair.get(victim_team, 0.0) - EPS:
            continue
        # below it: only for a team within its guarantee, and only by the victim taken while
        # the victim's team was above its guarantee and its fair share
        assert least + job_gpus(job) <= guarantees.get(job.team, 0.0) + EPS, (job.team, fair)
        floor_at = max(fair.get(victim_team, 0.0), guarantees.get(victim_team, 0.0))
        assert most + gpus > floor_at + EPS, (victim_team, most, gpus, fair)


def check_reasons(snapshot: Snapshot, decisions: Decisions) -> None:
    """(f) Every job is placed or has a reason: its id, a message, a position (1-based and
    distinct inside its team's queue)."""
    placed = {placement.job_id for placement in decisions.placements}
    assert placed.isdisjoint(decisions.pending)
    assert placed | set(decisions.pending) == {job.job_id for job in snapshot.pending}
    fifo = snapshot.policy.order == "fifo"
    positions: dict[str, list[int]] = defaultdict(list)
    for job in snapshot.pending:
        reason = decisions.pending.get(job.job_id)
        if reason is None:
            continue
        assert reason.job_id == job.job_id
        assert reason.message.strip()
        assert reason.position >= 1
        positions["" if fifo else job.team].append(reason.position)
        if reason.eta is not None:
            assert reason.eta >= NOW
    for numbers in positions.values():
        assert len(numbers) == len(set(numbers)), numbers


def shuffled(snapshot: Snapshot) -> Snapshot:
    return replace(
        snapshot,
        nodes=tuple(reversed(snapshot.nodes)),
        allocations=tuple(reversed(snapshot.allocations)),
        pending=tuple(reversed(snapshot.pending)),
        quotas=tuple(reversed(snapshot.quotas)),
    )


# -- (a)-(d), (f), (g): one cycle ------------------------------------------------------------


@SETTINGS
@given(snapshots())
def test_cycle_keeps_capacity_limits_gangs_preemption_rules_and_reasons(snapshot: Snapshot):
    decisions = schedule(snapshot, ManualClock(NOW))
    check_nothing_over_admitted(snapshot, decisions)
    check_limits(snapshot, decisions)
    check_gangs(snapshot, decisions)
    check_preemptions(snapshot, decisions)
    check_fair_shares(snapshot, decisions)
    check_reasons(snapshot, decisions)


def without_end_ties(snapshot: Snapshot) -> Snapshot:
    """The snapshot with every known end (running, or of a job placed with a max runtime)
    distinct and in the future, and nothing stopping, so that every decision has one right
    answer (ties between reservations go to the first node by name:
    test_a_reservation_does_not_depend_on_the_order_of_the_allocations).
    """
    allocations = tuple(
        replace(
            a,
            stopping=False,
            max_runtime=None
            if a.max_runtime is None
            else NOW - a.started_at + 100.0 + 10.0 * i + a.task,
        )
        for i, a in enumerate(snapshot.allocations)
    )
    pending = tuple(
        job
        if job.max_runtime is None
        # a gang's tasks end together, on several nodes: no max runtime for gangs
        else replace(job, max_runtime=None if job.tasks > 1 else job.max_runtime + 0.37 * i)
        for i, job in enumerate(snapshot.pending, start=1)
    )
    return replace(snapshot, allocations=allocations, pending=pending)


def long_queues() -> st.SearchStrategy[Snapshot]:
    """Snapshots with more pending jobs than GPUs, so that teams run out of jobs that can
    start, under the product policy and the simulator's (no explanations) ones."""
    policies = [*POLICIES, named("default"), named("las"), named("srtf-oracle")]
    return snapshots(max_nodes=3, jobs=(8, 30), policies=policies)


@SETTINGS
@given(long_queues())
def test_a_sleeping_team_had_no_job_that_could_start(snapshot: Snapshot):
    # a team sleeps once none of its jobs left can start (``Cycle._rest``); trying them all
    # anyway decides the same and says the same of each job, but for the checks of the
    # team's limit and of non-preemptible work: a sleeping team's jobs meet them against the
    # ledger at the end of the cycle (what the user then sees), not at a turn they never had
    decided = schedule(snapshot, ManualClock(NOW))
    with patch.object(Queues, "sleep", lambda self, team: None):
        tried_all = schedule(snapshot, ManualClock(NOW))
    assert decided.placements == tried_all.placements
    assert decided.preemptions == tried_all.preemptions
    assert decided.nominations == tried_all.nominations
    assert decided.pending.keys() == tried_all.pending.keys()
    ledger_checks = {Reason.OVER_QUOTA, Reason.NOT_GUARANTEED}
    for job_id, reason in decided.pending.items():
        codes = {reason.code, tried_all.pending[job_id].code}
        assert len(codes) == 1 or codes & ledger_checks, (job_id, codes)


@SETTINGS
@given(long_queues())
def test_the_victim_search_passes_over_only_what_could_not_help(snapshot: Snapshot):
    # searching every node, every candidate of every team, and every job decides the same
    # as passing over: a job asking more than a search found any node could free, at no
    # better a rank (``Preemptor._short``); a node that the teams a job may take from could
    # not free enough (``_freeable_by_teams``); a team's jobs too big to be taken
    # (``_team_by_size``)
    decided = schedule(snapshot, ManualClock(NOW))
    with (
        patch.object(Preemptor, "_short_key", lambda self, job, eligible: object()),
        patch.object(Preemptor, "_freeable_by_teams", lambda self, node, takeable: 1 << 30),
        patch.object(
            Preemptor,
            "_team_by_size",
            lambda self, team: [(-math.inf, self._team_order(team))],
        ),
    ):
        searched_all = schedule(snapshot, ManualClock(NOW))
    assert decided == searched_all


@SETTINGS
@given(snapshots())
def test_same_snapshot_same_decisions_in_any_input_order(snapshot: Snapshot):
    snapshot = without_end_ties(snapshot)
    first = schedule(snapshot, ManualClock(NOW))
    assert schedule(snapshot, ManualClock(NOW)) == first
    assert schedule(shuffled(snapshot), ManualClock(NOW)) == first


@SETTINGS
@given(snapshots(), st.sampled_from(["fifo", "drf", "srtf-oracle"]))
def test_baselines_are_deterministic_and_keep_capacity(snapshot: Snapshot, name: str):
    snapshot = without_end_ties(replace(snapshot, policy=named(name)))
    decisions = schedule(snapshot, ManualClock(NOW))
    assert decisions.pending == {}  # the simulator's policies explain nothing
    check_nothing_over_admitted(snapshot, decisions)
    check_limits(snapshot, decisions)
    check_gangs(snapshot, decisions)
    assert schedule(shuffled(snapshot), ManualClock(NOW)) == decisions


# -- bugs once known, each pinned by its smallest example ------------------------------------


def fair_share_floor_example() -> Snapshot:
    """Pool 3: a (guaranteed 2) has a 2-GPU job that fits only where b's two jobs run; b's
    fair share is 1."""
    return Snapshot(
        (gpu_node("node-0", 2), gpu_node("node-1", 1)),
        (running(10_001, "node-0", [0]), running(10_002, "node-0", [1])),
        (pending(1, gpus=2),),
        (quota("a", 2),),
    )


def single_large_borrower_example() -> Snapshot:
    """Pool 2: a (guaranteed 1) wants 1; b borrows both GPUs with one job (fair share 1): a
    takes it back, and b falls below its fair share by less than that job."""
    return Snapshot(
        (gpu_node("node-0", 2),),
        (running(10_001, "node-0", [0, 1]),),
        (pending(1),),
        (quota("a", 1),),
    )


@SETTINGS
@example(fair_share_floor_example())
@example(single_large_borrower_example())
@given(snapshots())
def test_cross_team_victims_leave_their_team_its_fair_share(snapshot: Snapshot):
    decisions = schedule(snapshot, ManualClock(NOW))
    check_fair_shares(snapshot, decisions)
    if snapshot == fair_share_floor_example():
        assert decisions.preemptions == []


def strict_queue_example() -> Snapshot:
    return Snapshot(
        (gpu_node("node-0", 2),),
        (running(10_001, "node-0", [0], team="c", preemptible=False),),
        (pending(1, gpus=2), pending(2), pending(3, team="b")),
        policy=replace(named("fifo"), explain=True),
    )


@SETTINGS
@example(strict_queue_example(), "fifo")
@given(snapshots(), st.sampled_from(["fifo", "drf"]))
def test_strict_queues_give_every_waiting_job_a_reason(snapshot: Snapshot, name: str):
    snapshot = replace(snapshot, policy=replace(named(name), explain=True))
    check_reasons(snapshot, schedule(snapshot, ManualClock(NOW)))


# -- (e): a guarantee can be taken back ------------------------------------------------------


@st.composite
def reclaim_cases(draw) -> Snapshot:
    """Team a below its guarantee, with 1-GPU jobs; every running job holds one GPU and is
    preemptible, and so does every job of the one other team (b), which borrows the rest.

    Several borrowing teams: test_a_team_below_its_guarantee_reclaims_from_any_borrower."""
    nodes = draw(pools(max_nodes=3))
    pool_gpus = sum(len(node.gpus) for node in nodes)
    allocations = draw(running_work(nodes, one_gpu_jobs=True))
    allocations = tuple(replace(a, team="b", user="b0") for a in allocations)
    mine = draw(st.integers(0, min(len(allocations), pool_gpus - 1)))
    allocations = tuple(
        replace(a, team="a", user="a0") if i < mine else a for i, a in enumerate(allocations)
    )
    guarantee = draw(st.integers(mine + 1, pool_gpus))
    quotas = [TeamQuota("a", {"*": guarantee}, None, draw(st.sampled_from([0.5, 1.0, 2.0])))]
    if draw(st.booleans()):
        quotas.append(quota("b", draw(st.integers(0, pool_gpus - guarantee))))
    jobs = [
        replace(job, team="b", user="b0", request=ResourceRequest(gpus=1), tasks=1)
        for job in draw(pending_jobs(draw(st.integers(0, 6))))
    ]
    ours = draw(st.integers(1, 3))
    jobs += [
        pending(100 + i, team="a", user="a0", priority=draw(st.sampled_from([-1, 0, 1])))
        for i in range(ours)
    ]
    return Snapshot(nodes, allocations, tuple(jobs), tuple(quotas))


def check_team_a_moves(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot, ManualClock(NOW))
    placed = {placement.job_id for placement in decisions.placements}
    ours = [job.job_id for job in snapshot.pending if job.team == "a"]
    moving = [
        job_id
        for job_id in ours
        if job_id in placed or decisions.pending[job_id].code is Reason.PREEMPTING
    ]
    assert moving, {job_id: decisions.pending[job_id] for job_id in ours}


@SETTINGS
@given(reclaim_cases())
def test_a_team_below_its_guarantee_gets_a_gpu_or_victims_in_one_cycle(snapshot: Snapshot):
    check_team_a_moves(snapshot)


@st.composite
def reclaim_cases_many_borrowers(draw) -> Snapshot:
    """As ``reclaim_cases``, with the borrowed GPUs spread over teams b, c and d."""
    snapshot = draw(reclaim_cases())
    allocations = tuple(
        replace(a, team=team, user=f"{team}0") if a.team == "b" else a
        for a in snapshot.allocations
        for team in [draw(st.sampled_from(["b", "c", "d"]))]
    )
    return replace(snapshot, allocations=allocations)


def fractional_shares_example() -> Snapshot:
    """Pool 5: a holds 1 of its guarantee of 2; b and c borrow 2 each with fair shares of 1.5:
    neither can lose a whole GPU."""
    teams = ["a", "b", "b", "c", "c"]
    return Snapshot(
        (gpu_node("node-0", 5),),
        tuple(running(10_000 + i, "node-0", [i], team=team) for i, team in enumerate(teams)),
        (pending(100, team="a", user="a0"),),
        (quota("a", 2),),
    )


def big_borrower_example() -> Snapshot:
    """Pool 3: a holds 1 of its guarantee of 2; b (guaranteed 1, served least) takes the 2
    free GPUs with one job first; taking that job back would leave b below its share of 1."""
    return Snapshot(
        (gpu_node("node-0", 3),),
        (running(10_001, "node-0", [2], team="a", user="a0"),),
        (pending(1, team="b", gpus=2), pending(100, team="a", user="a0")),
        (quota("a", 2), quota("b", 1)),
    )


@SETTINGS
@example(fractional_shares_example())
@example(big_borrower_example())
@given(reclaim_cases_many_borrowers())
def test_a_team_below_its_guarantee_reclaims_from_any_borrower(snapshot: Snapshot):
    check_team_a_moves(snapshot)


# -- (h): every job starts eventually -------------------------------------------------------


@st.composite
def traces(draw) -> list[TraceJob]:
    jobs = []
    for job_id in range(1, draw(st.integers(1, 20)) + 1):
        team = draw(st.sampled_from(["a", "b", "c"]))
        gpus = draw(st.sampled_from([0.25, 0.5, 1, 1, 2, 3, 4, 8]))
        jobs.append(
            TraceJob(
                job_id,
                float(draw(st.integers(0, 3_000))),
                float(draw(st.sampled_from([5, 60, 900, 2_000, 5_000]))),
                team,
                f"{team}{draw(st.integers(0, 1))}",
                ResourceRequest(gpus=gpus),
                draw(st.sampled_from([(), (), ("a100",), ("T4",), ("V100",)])),
            )
        )
    return jobs


CLUSTERS = ["1x2", "2x2", "1x4,1x1", "2x4:A100,1x2:T4", "1x8:A100"]


@st.composite
def sim_quotas(draw, nodes: Sequence[NodeCapacity]) -> tuple[TeamQuota, ...]:
    pool_gpus = sum(len(node.gpus) for node in nodes)
    largest = max(len(node.gpus) for node in nodes)
    guarantee_a = draw(st.integers(0, pool_gpus))
    guarantee_b = draw(st.integers(0, pool_gpus - guarantee_a))
    # a limit below a job's size would keep that job out for ever, which is the point of it
    limit = draw(st.sampled_from([None, max(largest, 8)]))
    return (
        quota("a", guarantee_a, limit=limit, weight=draw(st.sampled_from([1.0, 2.0]))),
        quota("b", guarantee_b),
    )


def gang_never_fits(job: TraceJob, nodes: Sequence[NodeCapacity]) -> bool:
    """Whether the simulator makes ``job`` a gang that no empty pool of ``nodes`` can hold
    (the simulator refuses it at submit: test_a_gang_larger_than_the_pool_is_refused_at_submit;
    the check stays so that this test does not depend on it)."""
    request, tasks = Replay(nodes, schedule, 0.0).shape(job)
    slots = 0
    for node in nodes:
        gpus = [gpu for gpu in node.gpus if model_allowed(job.gpu_types, gpu.model)]
        slots += len(gpus) // max(1, request.whole_gpus)
    return tasks > 1 and slots < tasks


def model_allowed(types: Sequence[str], model: str) -> bool:
    return not types or any(kind.lower() in model.lower() for kind in types)


def check_every_job_ends_or_is_refused(
    jobs: list[TraceJob], nodes: Sequence[NodeCapacity], **options
) -> None:
    jobs = [job for job in jobs if not gang_never_fits(job, nodes)]
    result = simulate(jobs, nodes, restart_cost=10.0, **options)
    replay = Replay(nodes, schedule, 0.0)
    ended = {record.job_id for record in result.records}
    for job in jobs:
        if job.job_id in ended:
            continue
        request, _ = replay.shape(job)
        refusal = infeasible_reason(request, nodes, job.gpu_types)
        assert refusal is not None, f"job {job.job_id} never started: {result.unscheduled}"
    assert len(result.records) + len(result.unscheduled) == len(jobs)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.sampled_from(CLUSTERS))
def test_every_job_starts_eventually_under_the_default_policy(jobs, spec):
    check_every_job_ends_or_is_refused(jobs, cluster(spec))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), traces(), st.sampled_from(CLUSTERS))
def test_every_job_starts_eventually_under_quotas(data, jobs, spec):
    nodes = cluster(spec)
    quotas = data.draw(sim_quotas(nodes))
    check_every_job_ends_or_is_refused(jobs, nodes, quotas=quotas)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.sampled_from(CLUSTERS), st.sampled_from(["fifo", "drf", "srtf-oracle"]))
def test_every_job_starts_eventually_under_the_baselines(jobs, spec, name):
    check_every_job_ends_or_is_refused(jobs, cluster(spec), settings=named(name))


def test_shares_held_add_up_the_same_in_any_order():
    # GPU 0 holds 0.1 + 0.25 + 0.3 (in floats, 0.35 or 0.35000000000000003 free by the order
    # of the sum) and GPU 1 0.65: the best fit for a tenth must not depend on that order
    nodes = (gpu_node("node-0", 2),)
    held = tuple(
        running(10_000 + i, "node-0", [0], share=share) for i, share in enumerate([0.1, 0.25, 0.3])
    ) + (running(10_010, "node-0", [1], share=0.65),)
    snapshot = Snapshot(nodes, held, (pending(1, gpus=0.1),))

    first = schedule(snapshot, ManualClock(NOW))
    assert schedule(shuffled(snapshot), ManualClock(NOW)) == first
