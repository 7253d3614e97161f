"""Request and response schemas of the REST API (kept apart from domain and ORM models)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.inventory import NodeInventory
from gpupool.domain.jobs import JobSpec, JobStatus, Role
from gpupool.store.models import EventModel, JobModel


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorOut(BaseModel):
    error: ErrorDetail


class GpuShareOut(BaseModel):
    uuid: str
    share: float
    memory_bytes: int


class PlacementOut(BaseModel):
    node: str
    gpus: list[GpuShareOut]
    cpus: float
    memory_bytes: int


class JobOut(BaseModel):
    id: int
    name: str | None
    user: str
    team: str
    status: JobStatus
    priority: int
    spec: JobSpec
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    reason: str | None
    message: str | None
    position: int | None = None
    attempts: int
    cancel_requested: bool
    placement: PlacementOut | None

    @classmethod
    def of(cls, job: JobModel, position: int | None = None, user: str | None = None) -> JobOut:
        """``user``: the owner's name when the caller knows it (saves loading the user)."""
        return cls(
            id=job.id,
            name=job.name,
            user=user or job.user.name,
            team=job.team.name,
            status=JobStatus(job.status),
            priority=job.priority,
            spec=JobSpec.model_validate(job.spec),
            submitted_at=job.submitted_at,
            started_at=job.started_at,
            ended_at=job.ended_at,
            exit_code=job.exit_code,
            reason=job.reason,
            message=job.message,
            position=position if job.status == JobStatus.PENDING else None,
            attempts=job.attempts,
            cancel_requested=job.cancel_requested_at is not None,
            placement=PlacementOut.model_validate(job.placement) if job.placement else None,
        )


class EventOut(BaseModel):
    id: int
    at: float
    reason: str
    message: str

    @classmethod
    def of(cls, event: EventModel) -> EventOut:
        return cls(id=event.id, at=event.at, reason=event.reason, message=event.message)


class AttemptOut(BaseModel):
    number: int
    node: str
    status: str
    started_at: float | None
    ended_at: float | None
    exit_code: int | None


class JobDetailOut(JobOut):
    events: list[EventOut]
    attempts_detail: list[AttemptOut]


class HolderOut(BaseModel):
    job_id: int
    job_name: str | None
    user: str
    team: str
    share: float
    memory_bytes: int


class GpuOut(BaseModel):
    uuid: str
    index: int
    model: str
    memory_bytes: int
    used_share: float
    used_memory_bytes: int
    utilization_percent: float | None
    holders: list[HolderOut]


class NodeOut(BaseModel):
    name: str
    schedulable: bool
    last_seen_at: float
    cpus: int
    memory_bytes: int
    gpus: list[GpuOut]
    inventory: NodeInventory


class TeamOut(BaseModel):
    id: int
    name: str


class TeamCreate(Strict):
    name: str = Field(min_length=1, max_length=63)


class UserOut(BaseModel):
    id: int
    name: str
    role: Role
    teams: list[str]
    disabled: bool
    has_password: bool


class UserCreate(Strict):
    name: str = Field(min_length=1, max_length=63)
    role: Role = Role.MEMBER
    teams: list[str] = Field(default_factory=list, max_length=100)
    password: str | None = Field(default=None, max_length=200)


class UserUpdate(Strict):
    role: Role | None = None
    teams: list[str] | None = Field(default=None, max_length=100)
    password: str | None = Field(default=None, max_length=200)
    disabled: bool | None = None


class TokenOut(BaseModel):
    id: int
    user: str
    name: str
    prefix: str
    created_at: float
    last_used_at: float | None
    expires_at: float | None
    revoked: bool


class TokenCreate(Strict):
    name: str = Field(default="cli", min_length=1, max_length=100)
    user: str | None = Field(default=None, description="admins may create tokens for others")
    expires_in_days: float | None = Field(default=None, gt=0, le=3650)


class TokenCreated(TokenOut):
    token: str = Field(description="shown once; store it now")


class LoginIn(Strict):
    user: str = Field(min_length=1, max_length=100)
    password: str = Field(min_length=1, max_length=500)


class WhoAmI(BaseModel):
    user: str
    role: Role
    teams: list[str]
    csrf_token: str | None = None


class LogChunk(BaseModel):
    job_id: int
    attempt: int | None
    offset: int
    next_offset: int
    text: str
    complete: bool
