"""Request and response schemas of the REST API (kept apart from domain and ORM models)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gpupool.domain.inventory import NodeInventory
from gpupool.domain.jobs import JobSpec, JobStatus, Role
from gpupool.scheduler.types import PendingReason
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
    blockers: list[str] = Field(
        default_factory=list, description="while pending: what it waits for, when known"
    )
    attempts: int
    cancel_requested: bool
    placement: PlacementOut | None
    preemptible: bool
    attained_gpu_seconds: float = Field(description="service received by earlier attempts")
    queued_at: float | None = Field(description="when it last (re)entered the queue")
    checkpoint_at: float | None = Field(description="newest file in its checkpoint directory")
    preemptions: int

    @classmethod
    def of(
        cls, job: JobModel, waiting: PendingReason | None = None, user: str | None = None
    ) -> JobOut:
        """``waiting``: the scheduler's latest word on it; ``user``: the owner's name when the
        caller knows it (saves loading the user)."""
        pending = job.status == JobStatus.PENDING and waiting is not None
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
            position=waiting.position if pending else None,
            blockers=list(waiting.blockers) if pending else [],
            attempts=job.attempts,
            cancel_requested=job.cancel_requested_at is not None,
            placement=PlacementOut.model_validate(job.placement) if job.placement else None,
            preemptible=job.preemptible,
            attained_gpu_seconds=job.attained or 0.0,
            queued_at=job.queued_at,
            checkpoint_at=job.checkpoint_at,
            preemptions=job.preemptions or 0,
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
    stop_reason: str | None = Field(description="preempted, max_runtime or cancelled")


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
    domain: int = Field(
        description="connectivity domain: GPUs of one domain share NVLink, a PCIe switch or a "
        "NUMA node, and a multi-GPU task gets GPUs of one domain when it can"
    )


class NodeOut(BaseModel):
    name: str
    schedulable: bool
    last_seen_at: float
    cpus: int
    memory_bytes: int
    gpus: list[GpuOut]
    inventory: NodeInventory


GpuModelKey = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64)]
GpuAmount = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]


class QuotaIn(Strict):
    """A team's quota. ``guarantee``: GPU model (part of its name, "*": any) -> GPUs."""

    guarantee: dict[GpuModelKey, GpuAmount] = Field(
        default_factory=dict, max_length=64, examples=[{"*": 4, "A100": 2}]
    )
    limit: GpuAmount | None = Field(default=None, description="most GPUs held at once; none")
    weight: float = Field(default=1.0, gt=0, le=1_000_000, allow_inf_nan=False)


class TeamCreate(QuotaIn):
    name: str = Field(min_length=1, max_length=63)


class TeamUsageOut(BaseModel):
    gpus: float = Field(description="GPUs its starting and running jobs hold")
    by_model: dict[str, float]


class TeamOut(BaseModel):
    id: int
    name: str
    guarantee: dict[str, float]
    limit: float | None
    weight: float
    usage: TeamUsageOut
    pending: int = Field(description="its jobs waiting to start")


# checked by the users service (InvalidWeight: code invalid_weight, a message with examples)
UserWeight = Annotated[
    float,
    Field(
        strict=True,
        description="fair share inside a team: a user of weight 2 is owed twice the GPU time "
        "of a user of weight 1; above 0",
        examples=[1, 2, 0.5],
    ),
]


# checked by the users service (UnixUserNotAllowed: code unix_user_not_allowed, says why)
UnixUser = Annotated[
    str | None,
    Field(
        max_length=32,
        description="the existing Unix account this user's jobs run under when the server "
        "runs as root (not root, not the server's own; several users may share one); null: "
        "none, jobs run under the server's default account. In an update, null clears it and "
        "leaving it out keeps it",
        examples=["ann", None],
    ),
]


class UserOut(BaseModel):
    id: int
    name: str
    role: Role
    teams: list[str]
    disabled: bool
    has_password: bool
    weight: float
    unix_user: str | None


class UserCreate(Strict):
    name: str = Field(min_length=1, max_length=63)
    role: Role = Role.MEMBER
    teams: list[str] = Field(default_factory=list, max_length=100)
    password: str | None = Field(default=None, max_length=200)
    weight: UserWeight = 1.0
    unix_user: UnixUser = None


class UserUpdate(Strict):
    role: Role | None = None
    teams: list[str] | None = Field(default=None, max_length=100)
    password: str | None = Field(default=None, max_length=200)
    disabled: bool | None = None
    weight: UserWeight | None = None
    unix_user: UnixUser = None


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


# -- why a job waits, the queue, teams over time ---------------------------------------------


class EstimateOut(BaseModel):
    """How an estimated start time was made: always an estimate, never a promise."""

    is_estimate: bool = True
    computed_at: float = Field(description="when the simulation ran (epoch seconds)")
    duration_seconds: float | None = Field(description="how long this job is assumed to run")
    duration_basis: str | None = Field(
        description="max_runtime, user_median, team_median or default"
    )
    duration_text: str | None
    assumes: list[str] = Field(description="what every estimate assumes, in words")


class WhyOut(BaseModel):
    """Why a job waits: its reason, queue position, blockers and estimated start time."""

    job_id: int
    status: JobStatus
    summary: str = Field(description="one sentence for people")
    code: str = Field(description="machine reason, PascalCase")
    message: str
    position: int | None = Field(description="place in its team's queue (1 is next)")
    blockers: list[str]
    eta: float | None = Field(description="estimated start, epoch seconds; null: see eta_unknown")
    eta_unknown: str | None = Field(description="why there is no estimate (pending jobs only)")
    estimate: EstimateOut | None = None

    @classmethod
    def of(cls, why: Any) -> WhyOut:
        estimate = None
        if why.estimate is not None:
            duration = why.estimate.duration
            estimate = EstimateOut(
                computed_at=why.estimate.computed_at,
                duration_seconds=duration.seconds if duration else None,
                duration_basis=duration.basis if duration else None,
                duration_text=duration.text if duration else None,
                assumes=list(why.assumptions),
            )
        return cls(
            job_id=why.job_id,
            status=why.status,
            summary=why.summary,
            code=why.code,
            message=why.message,
            position=why.position,
            blockers=list(why.blockers),
            eta=why.eta,
            eta_unknown=why.eta_unknown,
            estimate=estimate,
        )


class QueuedJobOut(BaseModel):
    id: int
    name: str | None
    user: str
    priority: int
    gpus: float | None
    gpu_memory_bytes: int | None
    submitted_at: float
    code: str
    message: str
    position: int | None
    blockers: list[str]
    eta: float | None
    eta_unknown: str | None


class QueueTeamOut(BaseModel):
    team: str
    jobs: list[QueuedJobOut]


class QueueOut(BaseModel):
    """Pending jobs by team, each team's queue in order; start times are estimates."""

    computed_at: float | None
    assumes: list[str]
    waiting: int = Field(description="jobs waiting in all (the teams list the first ones)")
    teams: list[QueueTeamOut]


class TeamSeriesOut(BaseModel):
    team: str
    guarantee: float = Field(description="its guarantee today, GPUs in all")
    limit: float | None
    weight: float
    guarantees: list[float] = Field(description="its guarantee in force, per bucket")
    held: list[float] = Field(description="average GPUs held, per bucket")
    demand: list[float] = Field(description="held plus GPUs its queued jobs asked for")
    fair: list[float] = Field(description="its fair share of the pool, per bucket")
    held_now: float = Field(description="GPUs its running jobs hold now")
    demand_now: float = Field(description="held now plus GPUs its waiting jobs ask for")
    fair_now: float = Field(description="its fair share now")


class TeamHistoryOut(BaseModel):
    """Each team's GPUs over time, bucket by bucket (``times``: each bucket's start)."""

    start: float
    end: float
    bucket_seconds: float
    pool_gpus: float
    times: list[float]
    teams: list[TeamSeriesOut]
