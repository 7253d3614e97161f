"""Builders for scheduler tests: nodes, pending jobs, allocations, quotas, demands, snapshots,
decisions: one builder per type, the others calls of it.

Two ways to write a job or a node, one builder under each: fluent (``node("n").gpus(4)``,
``job(1).gpus(2).team("x")``, run by ``run``) for placement tests, and keyword calls
(``gpu_node``, ``drained``, ``down``, ``pending``, ``running``, ``quota``, run by ``decide``)
for policy tests, whose jobs carry the policy fields; ``allocation`` builds every allocation
(``running``: one holding whole GPUs or shares of them). GPUs are named ``GPU-<node>-<index>``
by both. The policy builders' instant is ``NOW``: ``decide`` runs at it and ``running`` jobs
started before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Self

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import GiB
from gpupool.scheduler import schedule
from gpupool.scheduler.capacity import build_capacity
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.fit import Demand, demand_of
from gpupool.scheduler.shortfall import Shortfall, ShortfallFinder
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
from tests.support.clock import ManualClock

NOW = 100_000.0
GPU_MEMORY = 80 * GiB
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
BEST_FIT = replace(DEFAULT_POLICY, packing="best-fit")
LEVEL_2 = 40_000.0  # GPU-seconds: past the second default threshold (36,000)


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


# -- nodes ---------------------------------------------------------------------------------------


class NodeBuilder:
    """A node: 64 CPUs, 512 GiB and no GPU unless told; ``gpus`` may be called again to add
    GPUs of another model or size."""

    def __init__(self, name: str):
        self._name = name
        self._gpus: list[GpuCapacity] = []
        self._cpus = 64.0
        self._memory = 512 * GiB
        self._schedulable = True
        self._drained = False

    def gpus(
        self,
        count: int,
        memory: int = GPU_MEMORY,
        model: str = "H100",
        *,
        domains: Sequence[int] | None = None,
    ) -> Self:
        """Add ``count`` GPUs; ``domains``: each one's domain (default 0)."""
        domains = domains if domains is not None else [0] * count
        assert len(domains) == count
        for domain in domains:
            index = len(self._gpus)
            self._gpus.append(
                GpuCapacity(gpu_uuid(self._name, index), index, model, memory, domain)
            )
        return self

    def cpus(self, cpus: float) -> Self:
        self._cpus = cpus
        return self

    def memory(self, memory: int) -> Self:
        self._memory = memory
        return self

    def unschedulable(self) -> Self:
        """Not schedulable: down, unless ``drained``."""
        self._schedulable = False
        return self

    def drained(self) -> Self:
        """Not schedulable because an admin drained it."""
        self._schedulable = False
        self._drained = True
        return self

    def build(self) -> NodeCapacity:
        return NodeCapacity(
            self._name,
            tuple(self._gpus),
            self._cpus,
            self._memory,
            self._schedulable,
            self._drained,
        )


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def gpu_node(
    name: str,
    count: int,
    model: str = "H100",
    *,
    domains: Sequence[int] | None = None,
    memory: int = GPU_MEMORY,
    cpus: float = 64.0,
) -> NodeCapacity:
    """A built node of ``count`` GPUs of one model; ``domains``: each GPU's domain (default 0)."""
    return node(name).gpus(count, memory, model, domains=domains).cpus(cpus).build()


def drained(name: str, gpus: int = 1) -> NodeCapacity:
    """A built node of ``gpus`` GPUs that an admin drained."""
    return node(name).gpus(gpus).drained().build()


def down(name: str, gpus: int = 1) -> NodeCapacity:
    """A built node of ``gpus`` GPUs that is down (not schedulable, not drained)."""
    return node(name).gpus(gpus).unschedulable().build()


# -- pending jobs --------------------------------------------------------------------------------


class JobBuilder:
    """A pending job of team-a's alice, submitted at its id, asking for nothing unless told."""

    def __init__(self, job_id: int):
        self._job_id = job_id
        self._team = "team-a"
        self._user = "alice"
        self._priority = 0
        self._submitted = float(job_id)
        self._resources: dict[str, float | int | None] = {}
        self._fields: dict[str, object] = {}

    def team(self, team: str) -> Self:
        self._team = team
        return self

    def user(self, user: str) -> Self:
        self._user = user
        return self

    def priority(self, priority: int) -> Self:
        self._priority = priority
        return self

    def submitted(self, at: float) -> Self:
        self._submitted = at
        return self

    def gpus(self, gpus: float | None) -> Self:
        self._resources["gpus"] = gpus
        return self

    def gpu_memory(self, memory: int) -> Self:
        self._resources["gpu_memory_bytes"] = memory
        return self

    def cpus(self, cpus: float) -> Self:
        self._resources["cpus"] = cpus
        return self

    def memory(self, memory: int) -> Self:
        self._resources["memory_bytes"] = memory
        return self

    def policy_fields(self, **fields: object) -> Self:
        """PendingJob's other fields: tasks, preemptible, gpu_types, max_runtime, attained."""
        self._fields.update(fields)
        return self

    def build(self) -> PendingJob:
        request = ResourceRequest(**self._resources)
        return PendingJob(
            self._job_id,
            self._team,
            self._user,
            self._priority,
            self._submitted,
            request,
            **self._fields,  # type: ignore[arg-type]
        )


def job(job_id: int) -> JobBuilder:
    return JobBuilder(job_id)


def pending(
    job_id: int,
    *,
    team: str = "a",
    gpus: float | None = 1,
    user: str | None = None,
    priority: int = 0,
    submitted: float | None = None,
    tasks: int = 1,
    preemptible: bool = True,
    gpu_types: tuple[str, ...] = (),
    max_runtime: float | None = None,
    attained: float = 0.0,
    cpus: float = 1.0,
) -> PendingJob:
    """A built pending job of ``team``'s ``<team>-user``, one GPU, submitted at its id."""
    return (
        job(job_id)
        .team(team)
        .user(user if user is not None else f"{team}-user")
        .priority(priority)
        .submitted(submitted if submitted is not None else float(job_id))
        .gpus(gpus)
        .cpus(cpus)
        .policy_fields(
            tasks=tasks,
            preemptible=preemptible,
            gpu_types=gpu_types,
            max_runtime=max_runtime,
            attained=attained,
        )
        .build()
    )


# -- allocations ---------------------------------------------------------------------------------


def allocation(
    job_id: int,
    node_name: str,
    *shares: tuple[int, float, int],
    cpus: float = 1.0,
    memory: int = 0,
    **fields: object,
) -> Allocation:
    """An allocation holding (GPU index, share, memory) parts on ``node_name``; ``fields``:
    Allocation's others (team, priority, started_at, task, ...)."""
    gpus = tuple(GpuShare(gpu_uuid(node_name, i), share, mem) for i, share, mem in shares)
    return Allocation(job_id, node_name, gpus, cpus, memory, **fields)  # type: ignore[arg-type]


def running(
    job_id: int,
    node: str,
    gpus: Iterable[int] = (0,),
    *,
    team: str = "b",
    user: str | None = None,
    priority: int = 0,
    preemptible: bool = True,
    started_at: float = NOW - 60.0,
    attained: float = 0.0,
    checkpoint_at: float | None = None,
    max_runtime: float | None = None,
    stopping: bool = False,
    task: int = 0,
    share: float = 1.0,
    cpus: float = 1.0,
    standing: float | None = None,
) -> Allocation:
    """A task holding the given GPU indexes of ``node`` (whole, or ``share`` of each), with
    the policy fields of the job it belongs to."""
    memory = int(share * GPU_MEMORY) if share < 1 else GPU_MEMORY
    return allocation(
        job_id,
        node,
        *((index, share, memory) for index in gpus),
        cpus=cpus,
        team=team,
        user=user if user is not None else f"{team}-user",
        priority=priority,
        preemptible=preemptible,
        started_at=started_at,
        attained=attained,
        checkpoint_at=checkpoint_at,
        max_runtime=max_runtime,
        stopping=stopping,
        task=task,
        standing=standing,
    )


# -- quotas and policy ---------------------------------------------------------------------------


def quota(
    team: str,
    guarantee: float | Mapping[str, float] = 0,
    *,
    limit: float | None = None,
    weight: float = 1.0,
) -> TeamQuota:
    guaranteed = dict(guarantee) if isinstance(guarantee, Mapping) else {"*": guarantee}
    return TeamQuota(team, guaranteed if any(guaranteed.values()) else {}, limit, weight)


def policy(**changes: object) -> Policy:
    return replace(DEFAULT_POLICY, **changes)


# -- demands -------------------------------------------------------------------------------------


def demand(
    gpus: float | None = None,
    *,
    gpu_memory: int | None = None,
    cpus: float = 1.0,
    memory: int | None = None,
) -> Demand:
    """What a task asking for these takes, as placement reads it (``fit.demand_of``)."""
    request = ResourceRequest(
        gpus=gpus, gpu_memory_bytes=gpu_memory, cpus=cpus, memory_bytes=memory
    )
    return demand_of(request)


def shortfall_of(
    wanted: Demand, nodes: Iterable[NodeCapacity], allocations: Iterable[Allocation] = ()
) -> Shortfall | None:
    """Why ``wanted`` does not fit what ``nodes`` have free with ``allocations`` held (None:
    it fits), as a cycle's explanations find it."""
    return ShortfallFinder(build_capacity(list(nodes), allocations)).find(wanted)


# -- a cycle and what it decided -----------------------------------------------------------------


def snapshot(
    nodes: Iterable[NodeBuilder | NodeCapacity],
    jobs: Iterable[JobBuilder | PendingJob] = (),
    allocations: Iterable[Allocation] = (),
    policy: Policy = DEFAULT_POLICY,
    quotas: Iterable[TeamQuota] = (),
) -> Snapshot:
    built_nodes = tuple(n.build() if isinstance(n, NodeBuilder) else n for n in nodes)
    built_jobs = tuple(j.build() if isinstance(j, JobBuilder) else j for j in jobs)
    return Snapshot(built_nodes, tuple(allocations), built_jobs, tuple(quotas), policy=policy)


def run(
    nodes: Iterable[NodeBuilder | NodeCapacity],
    jobs: Iterable[JobBuilder | PendingJob] = (),
    allocations: Iterable[Allocation] = (),
    policy: Policy = DEFAULT_POLICY,
) -> Decisions:
    """One cycle at the clock's first instant (1,000 s)."""
    return schedule(snapshot(nodes, jobs, allocations, policy), ManualClock())


def fresh(snapshot: Snapshot) -> Decisions:
    """The cycle over a capacity built anew (not a kept one), at ``NOW``."""
    return Cycle(snapshot, ManualClock(NOW).now()).run()


def decide(
    nodes: Iterable[NodeCapacity],
    jobs: Iterable[PendingJob] = (),
    allocations: Iterable[Allocation] = (),
    quotas: Iterable[TeamQuota] = (),
    *,
    settings: Policy = DEFAULT_POLICY,
    now: float = NOW,
) -> Decisions:
    """One cycle at ``now`` (``NOW``), with the teams' quotas."""
    return schedule(snapshot(nodes, jobs, allocations, settings, quotas), ManualClock(now))


def placed(decisions: Decisions) -> dict[int, tuple[str, tuple[GpuShare, ...]]]:
    return {p.job_id: (p.node, p.gpus) for p in decisions.placements}


def placed_ids(decisions: Decisions) -> set[int]:
    return {placement.job_id for placement in decisions.placements}


def victims(decisions: Decisions) -> dict[int, int]:
    """Preempted job id -> the job it yields to."""
    return {item.job_id: item.for_job for item in decisions.preemptions}


def codes(decisions: Decisions) -> dict[int, str]:
    return {job_id: reason.code.value for job_id, reason in decisions.pending.items()}
