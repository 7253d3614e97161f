"""Builders for policy tests: teams, quotas, running jobs with their policy fields, decisions.

Kept apart from ``scheduler_builders`` (placement tests) so that each module stays small;
the two share the GPU uuid scheme ``GPU-<node>-<index>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import GiB
from gpupool.scheduler import schedule
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

NOW = 100_000.0
GPU_MEMORY = 80 * GiB


class Clock:
    def __init__(self, now: float = NOW):
        self._now = now

    def now(self) -> float:
        return self._now


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def gpu_node(
    name: str,
    count: int,
    model: str = "H100",
    *,
    domains: Sequence[int] | None = None,
    memory: int = GPU_MEMORY,
    cpus: float = 64.0,
) -> NodeCapacity:
    """A node of ``count`` GPUs of one model; ``domains``: each GPU's domain (default 0)."""
    domains = domains if domains is not None else [0] * count
    assert len(domains) == count
    gpus = tuple(
        GpuCapacity(gpu_uuid(name, i), i, model, memory, domain)
        for i, domain in zip(range(count), domains, strict=True)
    )
    return NodeCapacity(name, gpus, cpus, 512 * GiB)


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
) -> Allocation:
    """A task holding the given GPU indexes of ``node`` (whole, or ``share`` of each)."""
    parts = tuple(
        GpuShare(gpu_uuid(node, i), share, int(share * GPU_MEMORY) if share < 1 else GPU_MEMORY)
        for i in gpus
    )
    return Allocation(
        job_id,
        node,
        parts,
        cpus,
        0,
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
    )


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
    return PendingJob(
        job_id,
        team,
        user if user is not None else f"{team}-user",
        priority,
        submitted if submitted is not None else float(job_id),
        ResourceRequest(gpus=gpus, cpus=cpus),
        tasks=tasks,
        preemptible=preemptible,
        gpu_types=gpu_types,
        max_runtime=max_runtime,
        attained=attained,
    )


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


def decide(
    nodes: Iterable[NodeCapacity],
    jobs: Iterable[PendingJob] = (),
    allocations: Iterable[Allocation] = (),
    quotas: Iterable[TeamQuota] = (),
    *,
    settings: Policy = DEFAULT_POLICY,
    now: float = NOW,
) -> Decisions:
    snap = Snapshot(tuple(nodes), tuple(allocations), tuple(jobs), tuple(quotas), policy=settings)
    return schedule(snap, Clock(now))


def placed_ids(decisions: Decisions) -> set[int]:
    return {placement.job_id for placement in decisions.placements}


def victims(decisions: Decisions) -> dict[int, int]:
    """Preempted job id -> the job it yields to."""
    return {item.job_id: item.for_job for item in decisions.preemptions}


def codes(decisions: Decisions) -> dict[int, str]:
    return {job_id: reason.code.value for job_id, reason in decisions.pending.items()}
