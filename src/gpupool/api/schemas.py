"""Request and response schemas of the REST API (kept apart from domain and ORM models)."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.jobs import JobSpec, JobStatus, Role
from gpupool.domain.text import STORABLE, ShownText, Text, readable
from gpupool.scheduler.types import PendingReason
from gpupool.services import usage
from gpupool.store.models import EventModel, JobModel


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _stored_spec(value: Any) -> Any:
    """A spec from the database, shown even if it breaks a rule added after it was stored,
    with any NUL or lone surrogate replaced (no JSON encoder takes a lone surrogate)."""
    return JobSpec.stored(readable(value)) if isinstance(value, dict) else value


StoredSpec = Annotated[JobSpec, BeforeValidator(_stored_spec)]


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
    name: ShownText | None
    user: str
    team: str
    status: JobStatus
    priority: int
    spec: StoredSpec
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    reason: str | None
    message: ShownText | None
    position: int | None = None
    blockers: list[str] = Field(
        default_factory=list, description="while pending: what it waits for, when known"
    )
    attempts: int
    cancel_requested: bool
    placement: PlacementOut | None
    preemptible: bool
    attained_gpu_seconds: float = Field(
        description="GPU-seconds received by all its attempts, a running one up to now"
    )
    queued_at: float | None = Field(description="when it last (re)entered the queue")
    checkpoint_at: float | None = Field(description="newest file in its checkpoint directory")
    preemptions: int
    array_id: int | None = Field(None, description="the job array it is a task of")
    array_index: int | None = Field(None, description="its index in that array (ID_INDEX)")

    @classmethod
    def of(
        cls,
        job: JobModel,
        waiting: PendingReason | None = None,
        user: str | None = None,
        now: float | None = None,
    ) -> JobOut:
        """``waiting``: the scheduler's latest word on it; ``user``: the owner's name when the
        caller knows it (saves loading the user); ``now``: the time up to which a running
        attempt's GPU time counts as attained (None: only what requeued attempts received)."""
        pending = job.status == JobStatus.PENDING and waiting is not None
        return cls(
            id=job.id,
            name=job.name,
            user=user or job.user.name,
            team=job.team.name,
            status=JobStatus(job.status),
            priority=job.priority,
            spec=job.spec,
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
            attained_gpu_seconds=(
                job.attained or 0.0 if now is None else usage.attained_gpu_seconds(job, now)
            ),
            queued_at=job.queued_at,
            checkpoint_at=job.checkpoint_at,
            preemptions=job.preemptions or 0,
            array_id=job.array_id,
            array_index=job.array_index,
        )


class JobSubmit(JobSpec):
    """A job to queue; with ``array``, a job array: one task (a job of its own) per index."""

    array: ArraySpec | None = Field(
        default=None,
        description="queue one task per index, as sbatch --array does; each task sees "
        "GPUPOOL_ARRAY_ID, GPUPOOL_ARRAY_INDEX and GPUPOOL_ARRAY_TASK_COUNT",
        examples=[{"indexes": "0-999%50"}, {"indexes": [1, 3, 5], "max_running": 2}],
    )

    def job_spec(self) -> JobSpec:
        """The spec of the job (of each task), as validated, without ``array``."""
        values = {name: getattr(self, name) for name in JobSpec.model_fields}
        return JobSpec.model_construct(self.model_fields_set - {"array"}, **values)


class ArrayOut(BaseModel):
    """A job array as one: each of its tasks is a job of its own (list them with
    ``GET /jobs?array=ID``); task ``N`` of array ``ID`` is written ``ID_N``."""

    id: int = Field(description="the array's id: the job id of its first task")
    name: str | None
    user: str
    team: str
    spec: JobSpec = Field(description="the spec of every task")
    submitted_at: float
    indexes: str = Field(description="its indexes as sbatch writes them: 0-999, 1,3,5-7")
    size: int = Field(description="its tasks")
    max_running: int | None = Field(description="the most tasks that run at once; null: all")
    counts: dict[str, int] = Field(description="its tasks by status")

    @classmethod
    def of(cls, summary: Any, **more: Any) -> Self:
        """From ``services.arrays.ArraySummary`` (``more``: a subclass's own fields)."""
        array, first = summary.array, summary.first
        return cls(
            id=array.id,
            name=first.name,
            user=first.user.name,
            team=first.team.name,
            spec=JobSpec.model_validate(first.spec),
            submitted_at=array.submitted_at,
            indexes=array.indexes,
            size=array.size,
            max_running=array.max_running,
            counts=summary.counts,
            **more,
        )


class ArraySubmitted(ArrayOut):
    job_ids: list[int] = Field(description="its tasks' job ids, in the order of their indexes")


class EventOut(BaseModel):
    id: int
    at: float
    reason: str
    message: ShownText

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
    """A job holding (part of) a GPU; a job of a team the caller is not in shows only what it
    holds (``other_team`` true; its id, name, user and team null)."""

    job_id: int | None
    job_name: ShownText | None
    user: str | None
    team: str | None
    share: float
    memory_bytes: int
    other_team: bool = Field(
        False,
        description="a job of a team you are not in: its id, name, user and team are not shown",
    )


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


GpuModelKey = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64), STORABLE
]
GpuAmount = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]


class QuotaIn(Strict):
    """A team's quota. ``guarantee``: GPU model (part of its name, "*": any) -> GPUs."""

    guarantee: dict[GpuModelKey, GpuAmount] = Field(
        default_factory=dict, max_length=64, examples=[{"*": 4, "A100": 2}]
    )
    limit: GpuAmount | None = Field(default=None, description="most GPUs held at once; none")
    weight: float = Field(default=1.0, gt=0, le=1_000_000, allow_inf_nan=False)


class TeamCreate(QuotaIn):
    name: Text = Field(min_length=1, max_length=63)


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
    Annotated[str, Field(max_length=32), STORABLE] | None,
    Field(
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


Password = Annotated[str, Field(max_length=200), STORABLE]


class UserCreate(Strict):
    name: Text = Field(min_length=1, max_length=63)
    role: Role = Role.MEMBER
    teams: list[Text] = Field(default_factory=list, max_length=100)
    password: Password | None = None
    weight: UserWeight = 1.0
    unix_user: UnixUser = None


class UserUpdate(Strict):
    role: Role | None = None
    teams: list[Text] | None = Field(default=None, max_length=100)
    password: Password | None = None
    disabled: bool | None = None
    weight: UserWeight | None = None
    unix_user: UnixUser = None


class PasswordChange(Strict):
    """A user's change of its own password: ``current`` may be left out while it has none."""

    current: str | None = Field(default=None, max_length=200)
    new: str = Field(max_length=200)


class TeamDeleted(BaseModel):
    name: str
    finished_jobs: int = Field(description="its finished jobs, whose records are kept")


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
    name: Text = Field(default="cli", min_length=1, max_length=100)
    user: Text | None = Field(default=None, description="admins may create tokens for others")
    expires_in_days: float | None = Field(default=None, gt=0, le=3650, allow_inf_nan=False)


class TokenCreated(TokenOut):
    token: str = Field(description="shown once; store it now")


class LoginIn(Strict):
    user: Text = Field(min_length=1, max_length=100)
    password: Text = Field(min_length=1, max_length=500)


class WhoAmI(BaseModel):
    user: str
    role: Role
    teams: list[str]
    csrf_token: str | None = None


class LogChunk(BaseModel):
    job_id: int
    attempt: int | None = Field(description="the attempt read (each attempt has its own log)")
    offset: int = Field(
        description="the byte offset read from; one past the log's end is refused with 416 "
        "offset_out_of_range, whose details give the log's size"
    )
    next_offset: int
    text: str
    complete: bool = Field(description="the job has ended and its last log is read to its end")
    next_attempt: int | None = Field(
        None, description="a later attempt with a log: this one will not grow; read that next"
    )
    note: str | None = Field(
        None, description="announces this attempt, e.g. 'attempt 2 started (requeued ...)'"
    )


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
    name: ShownText | None
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
