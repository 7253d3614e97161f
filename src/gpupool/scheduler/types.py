"""The scheduler's input (an immutable snapshot) and output (decisions).

The scheduler is a pure function of these values and an injected clock: the server loop,
the simulator, the ETA predictor and the benchmarks all build a ``Snapshot`` and call
``gpupool.scheduler.schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gpupool.domain.jobs import Reason, ResourceRequest

SHARE_EPSILON = 1e-9


class Clock(Protocol):
    def now(self) -> float: ...


@dataclass(frozen=True, slots=True)
class GpuCapacity:
    uuid: str
    index: int
    model: str
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    name: str
    gpus: tuple[GpuCapacity, ...]
    cpus: float
    memory_bytes: int
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class GpuShare:
    """Part of one GPU held by a task: compute share in (0, 1] and reserved memory."""

    uuid: str
    share: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """What a starting or running job holds."""

    job_id: int
    node: str
    gpus: tuple[GpuShare, ...]
    cpus: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: int
    team: str
    user: str
    priority: int
    submitted_at: float
    request: ResourceRequest


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeCapacity, ...]
    allocations: tuple[Allocation, ...]
    pending: tuple[PendingJob, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: int
    node: str
    gpus: tuple[GpuShare, ...]
    cpus: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job still waits: a PascalCase code, a message for people, its queue position."""

    job_id: int
    code: Reason
    message: str
    position: int


@dataclass(slots=True)
class Decisions:
    placements: list[Placement] = field(default_factory=list)
    pending: dict[int, PendingReason] = field(default_factory=dict)
