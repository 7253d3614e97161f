"""Small fluent builders for scheduler tests: nodes, jobs, allocations, snapshots, a clock."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Self

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
)


class FakeClock:
    def __init__(self, now: float = 1_000.0):
        self._now = now

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


class NodeBuilder:
    def __init__(self, name: str):
        self._name = name
        self._gpus: list[GpuCapacity] = []
        self._cpus = 64.0
        self._memory = 512 * GiB
        self._schedulable = True

    def gpus(self, count: int, memory: int = 80 * GiB, model: str = "H100") -> Self:
        for _ in range(count):
            index = len(self._gpus)
            self._gpus.append(GpuCapacity(gpu_uuid(self._name, index), index, model, memory))
        return self

    def cpus(self, cpus: float) -> Self:
        self._cpus = cpus
        return self

    def memory(self, memory: int) -> Self:
        self._memory = memory
        return self

    def unschedulable(self) -> Self:
        self._schedulable = False
        return self

    def build(self) -> NodeCapacity:
        return NodeCapacity(
            self._name, tuple(self._gpus), self._cpus, self._memory, self._schedulable
        )


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class JobBuilder:
    def __init__(self, job_id: int):
        self._job_id = job_id
        self._team = "team-a"
        self._user = "alice"
        self._priority = 0
        self._submitted = float(job_id)
        self._resources: dict[str, float | int | None] = {}

    def team(self, team: str) -> Self:
        self._team = team
        return self

    def priority(self, priority: int) -> Self:
        self._priority = priority
        return self

    def submitted(self, at: float) -> Self:
        self._submitted = at
        return self

    def gpus(self, gpus: float) -> Self:
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

    def build(self) -> PendingJob:
        request = ResourceRequest(**self._resources)
        return PendingJob(
            self._job_id, self._team, self._user, self._priority, self._submitted, request
        )


def job(job_id: int) -> JobBuilder:
    return JobBuilder(job_id)


def allocation(
    job_id: int,
    node_name: str,
    *shares: tuple[int, float, int],
    cpus: float = 1.0,
    memory: int = 0,
) -> Allocation:
    """An allocation holding (GPU index, share, memory) parts on ``node_name``."""
    gpus = tuple(GpuShare(gpu_uuid(node_name, i), share, mem) for i, share, mem in shares)
    return Allocation(job_id, node_name, gpus, cpus, memory)


def snapshot(
    nodes: Iterable[NodeBuilder | NodeCapacity],
    jobs: Iterable[JobBuilder | PendingJob] = (),
    allocations: Iterable[Allocation] = (),
    policy: Policy = DEFAULT_POLICY,
) -> Snapshot:
    built_nodes = tuple(n.build() if isinstance(n, NodeBuilder) else n for n in nodes)
    built_jobs = tuple(j.build() if isinstance(j, JobBuilder) else j for j in jobs)
    return Snapshot(built_nodes, tuple(allocations), built_jobs, policy=policy)


BEST_FIT = replace(DEFAULT_POLICY, packing="best-fit")


def run(
    nodes: Iterable[NodeBuilder | NodeCapacity],
    jobs: Iterable[JobBuilder | PendingJob] = (),
    allocations: Iterable[Allocation] = (),
    policy: Policy = DEFAULT_POLICY,
) -> Decisions:
    return schedule(snapshot(nodes, jobs, allocations, policy), FakeClock())


def placed(decisions: Decisions) -> dict[int, tuple[str, tuple[GpuShare, ...]]]:
    return {p.job_id: (p.node, p.gpus) for p in decisions.placements}
