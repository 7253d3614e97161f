"""SQLAlchemy 2 ORM classes (suffix ``Model``). Times are UTC epoch seconds (floats)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Time = Float(precision=53)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class TeamModel(Base):
    """A team; a deleted one keeps its row (``deleted_at``) for its finished jobs' records,
    and its name is free for a new team: names are unique among the teams not deleted."""

    __tablename__ = "teams"
    __table_args__ = (
        Index(
            "uq_teams_live_name",
            "name",
            unique=True,
            sqlite_where=text("deleted_at IS NULL"),
            postgresql_where=text("deleted_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Time)
    # GPU model (or "*": any model) -> guaranteed GPUs; a limit of None: no limit
    guarantee: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    gpu_limit: Mapped[float | None] = mapped_column(Float)
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default=text("1"))
    deleted_at: Mapped[float | None] = mapped_column(Time)
    # storage (services.scheduling, loops.storage): the most bytes its files may take (None:
    # no quota), and what they took at the last scan (None: not scanned yet), and when
    storage_quota: Mapped[int | None] = mapped_column(BigInteger)
    storage_used: Mapped[int | None] = mapped_column(BigInteger)
    storage_scanned_at: Mapped[float | None] = mapped_column(Time)


class QuotaChangeModel(Base):
    """A team's quota as an admin set it (or as the team was created), from ``at`` on."""

    __tablename__ = "quota_changes"
    __table_args__ = (Index("ix_quota_changes_team_at", "team_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    at: Mapped[float] = mapped_column(Time)
    guarantee: Mapped[dict[str, Any]] = mapped_column(JSON)
    gpu_limit: Mapped[float | None] = mapped_column(Float)
    weight: Mapped[float] = mapped_column(Float)


class PoolChangeModel(Base):
    """The pool's size (GPUs of schedulable nodes) from ``at`` on; recorded when it changes."""

    __tablename__ = "pool_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Time, index=True)
    gpus: Mapped[int] = mapped_column(Integer)


class UserModel(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint("weight > 0", name="weight_positive"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    password_hash: Mapped[str | None] = mapped_column(String(300))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Time)
    # fair share inside a team: a user of weight 2 is owed twice the GPU time of one of 1
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default=text("1"))
    # the Unix account its jobs run under when the server is root; None: the server's default
    unix_user: Mapped[str | None] = mapped_column(String(32))
    teams: Mapped[list[TeamModel]] = relationship(secondary="memberships", lazy="selectin")
    # the teams it is a team admin of (a subset of ``teams``); change them through memberships
    admin_of: Mapped[list[TeamModel]] = relationship(
        secondary="memberships",
        secondaryjoin="and_(TeamModel.id == MembershipModel.team_id, MembershipModel.admin)",
        lazy="selectin",
        viewonly=True,
    )


class MembershipModel(Base):
    __tablename__ = "memberships"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    team_id: Mapped[int] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    )
    # a team admin: adds and removes the team's members and names its other team admins
    admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class TokenModel(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Time)
    last_used_at: Mapped[float | None] = mapped_column(Time)
    expires_at: Mapped[float | None] = mapped_column(Time)
    revoked_at: Mapped[float | None] = mapped_column(Time)


class WebSessionModel(Base):
    __tablename__ = "web_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # The API token given as the password, if one was: revoking it ends the session.
    token_id: Mapped[int | None] = mapped_column(
        ForeignKey("tokens.id", ondelete="CASCADE"), index=True
    )
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Time)
    expires_at: Mapped[float] = mapped_column(Time)


class NodeModel(Base):
    """A node of the pool. ``schedulable`` (new work may be placed here) is derived from
    ``state``, ``drain`` and ``removed_at`` by ``services.cluster``'s ``settle`` only; a removed
    node keeps its row (and name) until it registers again, as a new join."""

    __tablename__ = "nodes"
    __table_args__ = (CheckConstraint("state IN ('up', 'down')", name="state_known"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    inventory: Mapped[dict[str, Any]] = mapped_column(JSON)
    schedulable: Mapped[bool] = mapped_column(Boolean, default=True)
    discovered_at: Mapped[float] = mapped_column(Time)
    last_seen_at: Mapped[float] = mapped_column(Time)
    # an admin's maintenance flag: no new work here; what runs goes on to its end
    drain: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    drain_reason: Mapped[str | None] = mapped_column(Text)
    # NodeState: "down" once the cluster lost it
    state: Mapped[str] = mapped_column(String(10), default="up", server_default="up")
    joined_at: Mapped[float | None] = mapped_column(Time)  # when it last (re)joined
    down_at: Mapped[float | None] = mapped_column(Time)
    removed_at: Mapped[float | None] = mapped_column(Time)
    address: Mapped[str | None] = mapped_column(String(255))  # how other nodes reach it
    fabric_group: Mapped[str | None] = mapped_column(String(100))
    # what it keeps of what jobs fetch before they start (key -> bytes, as
    # ``scheduler.types.Want`` names them), as its executor last reported; None: no report yet
    holds: Mapped[dict[str, int] | None] = mapped_column(JSON)
    holds_at: Mapped[float | None] = mapped_column(Time)


class NodeEventModel(Base):
    """A change to a node (``NodeChange``), who made it (None: the cluster) and why. Kept by
    name, not by row: a node that leaves and joins again keeps one history."""

    __tablename__ = "node_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    at: Mapped[float] = mapped_column(Time)
    reason: Mapped[str] = mapped_column(String(50))
    message: Mapped[str] = mapped_column(Text)
    actor: Mapped[str | None] = mapped_column(String(100))


class JobArrayModel(Base):
    """A job array: tasks of one spec, each a job of its own with an index (``JobModel``'s
    ``array_id`` and ``array_index``). Its id is its first task's job id, as Slurm's array
    job id is, so that ``12`` names the array and ``12_7`` its task of index 7."""

    __tablename__ = "job_arrays"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    indexes: Mapped[str] = mapped_column(Text)  # as sbatch writes them: "0-999", "1,3,5-7"
    size: Mapped[int] = mapped_column(Integer)  # its tasks
    max_running: Mapped[int | None] = mapped_column(Integer)  # most tasks at once; None: all
    submitted_at: Mapped[float] = mapped_column(Time)


class JobModel(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_status_team", "status", "team_id"),
        # finds an array's tasks, and one task by its index
        UniqueConstraint("array_id", "array_index", name="uq_jobs_array_task"),
        # the few jobs that wait for others (services.jobs._dependencies reads them each pass)
        Index(
            "ix_jobs_waiting",
            "id",
            sqlite_where=text("waiting = 1"),  # as SQLAlchemy writes waiting == True there
            postgresql_where=text("waiting"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    gpus: Mapped[float] = mapped_column(Float, default=0)
    submitted_at: Mapped[float] = mapped_column(Time)
    started_at: Mapped[float | None] = mapped_column(Time)
    ended_at: Mapped[float | None] = mapped_column(Time)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(String(50))
    message: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested_at: Mapped[float | None] = mapped_column(Time)
    node: Mapped[str | None] = mapped_column(String(200))
    placement: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # GPU-seconds of service its earlier (preempted) attempts received
    attained: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    queued_at: Mapped[float | None] = mapped_column(Time)  # back in the queue (None: submit)
    checkpoint_at: Mapped[float | None] = mapped_column(Time)
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # held (JobSpec.hold, gpupool hold): pending, left out of the scheduler's snapshot and
    # never claimed by a launch until released
    held: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # a task of a job array: the array (its first task's job id) and this task's index
    array_id: Mapped[int | None] = mapped_column(ForeignKey("job_arrays.id"))
    array_index: Mapped[int | None] = mapped_column(Integer)
    # JobKind: a batch job, or the workload of a notebook or of a deployment's replica
    kind: Mapped[str] = mapped_column(String(20), default="job", server_default="job")
    # it waits for jobs it depends on (JobDependencyModel) and is not given to the scheduler
    waiting: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # variables gpupool sets for this job (a trial's GPUPOOL_PARAMS), never in its spec
    platform_env: Mapped[dict[str, str] | None] = mapped_column(JSON)
    # a trial's standing in its experiment at its last rung passed (1: first, towards 0:
    # last), for the scheduler's choice of victims; None: not a trial, or not judged yet
    standing: Mapped[float | None] = mapped_column(Float)

    user: Mapped[UserModel] = relationship(lazy="joined")
    team: Mapped[TeamModel] = relationship(lazy="joined")


class JobDependencyModel(Base):
    """A job (``job_id``) that starts only once another job of its team
    (``depends_on_id``, submitted before it) has ended as ``condition`` asks
    (``domain.dependencies.Condition``)."""

    __tablename__ = "job_dependencies"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    depends_on_id: Mapped[int] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    condition: Mapped[str] = mapped_column(String(20))


class AttemptModel(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number", name="uq_attempts_job_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(200))
    placement: Mapped[dict[str, Any]] = mapped_column(JSON)
    executor_state: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), index=True)
    created_at: Mapped[float] = mapped_column(Time)
    started_at: Mapped[float | None] = mapped_column(Time)
    ended_at: Mapped[float | None] = mapped_column(Time, index=True)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    stop_reason: Mapped[str | None] = mapped_column(String(20))  # StopReason, when stopped


class EventModel(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[float] = mapped_column(Time)
    reason: Mapped[str] = mapped_column(String(50))
    message: Mapped[str] = mapped_column(Text)


class CodeUploadModel(Base):
    """A user's upload of a code snapshot: the right to run it in the jobs of their teams.
    The archive is stored once, by content (``ref`` = sha256:<hex>); each uploader has a row,
    so knowing a ref gives no access to another team's code."""

    __tablename__ = "code_uploads"
    __table_args__ = (UniqueConstraint("ref", "user_id", name="uq_code_uploads_ref_user"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ref: Mapped[str] = mapped_column(String(80), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    uploaded_at: Mapped[float] = mapped_column(Time)
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # the archive's
    files: Mapped[int] = mapped_column(Integer)
    unpacked_bytes: Mapped[int] = mapped_column(BigInteger)  # its files'


class NotebookModel(Base):
    """A user's JupyterLab (``domain.notebooks``). While it runs, ``job_id`` is its job (of
    kind notebook) and ``token`` the secret its JupyterLab was started with: the proxy adds
    it to what it forwards; it is never shown. ``stopped_at`` set: stopped, ``stop_reason``
    (StopCause) and ``stop_message`` say why. ``active_at``: its last kernel or GPU
    activity, as the idle watch saw it."""

    __tablename__ = "notebooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str | None] = mapped_column(String(100))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    resources: Mapped[dict[str, Any]] = mapped_column(JSON)  # a ResourceRequest as JSON
    gpu_types: Mapped[list[Any]] = mapped_column(JSON, default=list)  # JobSpec's gpu_types
    environment: Mapped[str | None] = mapped_column(String(200))  # as asked: NAME[@ID]
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    token: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Time)
    started_at: Mapped[float | None] = mapped_column(Time)  # its current job's submit
    active_at: Mapped[float | None] = mapped_column(Time)
    stopped_at: Mapped[float | None] = mapped_column(Time, index=True)
    stop_reason: Mapped[str | None] = mapped_column(String(50))
    stop_message: Mapped[str | None] = mapped_column(Text)

    user: Mapped[UserModel] = relationship(lazy="joined")
    team: Mapped[TeamModel] = relationship(lazy="joined")


class JobMetricModel(Base):
    """One point of a job's metric series: what the job reported (``loss`` at ``step``) or
    what its runner sampled (``gpu.0.utilization``), per attempt. ``at``: when it was taken."""

    __tablename__ = "job_metrics"
    __table_args__ = (Index("ix_job_metrics_job_name", "job_id", "name", "attempt", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(100))
    step: Mapped[int | None] = mapped_column(BigInteger)
    at: Mapped[float] = mapped_column(Time)
    value: Mapped[float] = mapped_column(Float(precision=53))


class MetricCursorModel(Base):
    """How far the server has read one attempt's metric records (bytes), and whether it has
    read them to their end once the attempt ended. Moved in the same transaction as the
    points it covers, so a crash neither loses nor repeats a point."""

    __tablename__ = "metric_cursors"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger, default=0)
    done: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), index=True)


class RegisteredModelModel(Base):
    """A named model of a team (the model registry); its versions are ``ModelVersionModel``.
    Names are unique per team."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_models_team_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Time)

    team: Mapped[TeamModel] = relationship(lazy="joined")


class ModelVersionModel(Base):
    """A version of a model: its files, kept as one archive by content (``archive`` =
    sha256:<hex>, stored once under the data directory's ``models``), and what made it."""

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "number", name="uq_model_versions_model_number"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    archive: Mapped[str] = mapped_column(String(80), index=True)
    archive_path: Mapped[str] = mapped_column(Text)  # where the server stored it
    archive_bytes: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # its files'
    file_count: Mapped[int] = mapped_column(Integer)
    # the job it came from; kept as a plain id (no foreign key): a version outlives its job
    source_job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    source_path: Mapped[str] = mapped_column(Text, default="", server_default="")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # the source job's, as submitted
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)  # its final metrics: name -> value
    created_at: Mapped[float] = mapped_column(Time)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))

    model: Mapped[RegisteredModelModel] = relationship(lazy="joined")
    creator: Mapped[UserModel] = relationship(lazy="joined")


class ModelFileModel(Base):
    """A file of a model version: its path in the version, size and SHA-256 (hex)."""

    __tablename__ = "model_files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), index=True
    )
    path: Mapped[str] = mapped_column(Text)  # unique in its version (the archive's check)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))


class DeploymentModel(Base):
    """A deployment: the desired state of a served model (its version, replicas, resources,
    command or the built-in server), reconciled by ``loops.rollouts``. Its name is unique
    in its team among deployments not stopped (its address: /serve/NAME/..., or
    /serve/NAME@TEAM/... where two teams use the name).
    ``generation`` counts the versions it was asked to serve: replicas of an older one are
    replaced, one by one, during a rolling update."""

    __tablename__ = "deployments"
    __table_args__ = (
        Index(
            "uq_deployments_live_team_name",
            "team_id",
            "name",
            unique=True,
            sqlite_where=text("stopped_at IS NULL"),
            postgresql_where=text("stopped_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))  # replicas run as this user
    created_at: Mapped[float] = mapped_column(Time)
    updated_at: Mapped[float] = mapped_column(Time)
    stopped_at: Mapped[float | None] = mapped_column(Time)
    replicas: Mapped[int] = mapped_column(Integer)
    # what each replica is: a JSON of domain.deployments.ReplicaTemplate
    template: Mapped[dict[str, Any]] = mapped_column(JSON)
    model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    generation: Mapped[int] = mapped_column(Integer, default=1)
    last_generation: Mapped[int] = mapped_column(Integer, default=1)  # the highest given out
    # a rolling update in progress: the generation it rolls away from (None: none)
    rolling_from: Mapped[int | None] = mapped_column(Integer)
    rolling_from_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    reason: Mapped[str | None] = mapped_column(String(50))
    message: Mapped[str | None] = mapped_column(Text)

    team: Mapped[TeamModel] = relationship(lazy="joined")
    user: Mapped[UserModel] = relationship(lazy="joined")


class DeploymentReplicaModel(Base):
    """One replica of a deployment: a slot that runs one job at a time (a replica job of
    ``JobKind.REPLICA``); a job that ends is replaced by a new one in the same slot
    (``restarts``). ``state``: domain.deployments.ReplicaState."""

    __tablename__ = "deployment_replicas"
    __table_args__ = (Index("ix_deployment_replicas_live", "deployment_id", "retired_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"))
    generation: Mapped[int] = mapped_column(Integer)
    model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), index=True)
    state: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[float] = mapped_column(Time)
    ready_at: Mapped[float | None] = mapped_column(Time)
    failures: Mapped[int] = mapped_column(Integer, default=0)  # health checks failed in a row
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    next_start_at: Mapped[float | None] = mapped_column(Time)  # a restart waits (back-off)
    retired_at: Mapped[float | None] = mapped_column(Time)  # drained: routed no more
    message: Mapped[str | None] = mapped_column(Text)
    # the secret its current job was started with (never shown): the proxy and the health
    # checks send it, so that the replica can refuse any other caller of its node
    token: Mapped[str | None] = mapped_column(String(64))


class DeploymentKeyModel(Base):
    """A key that may call one deployment's /serve address (stored as its hash)."""

    __tablename__ = "deployment_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Time)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))
    revoked_at: Mapped[float | None] = mapped_column(Time)


class DeploymentEventModel(Base):
    """What happened to a deployment (a replica restarted, a roll stopped) and why."""

    __tablename__ = "deployment_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[float] = mapped_column(Time)
    reason: Mapped[str] = mapped_column(String(50))
    message: Mapped[str] = mapped_column(Text)


class EnvironmentModel(Base):
    """A named Python environment of a team (``team_id`` None: a prefix an admin registered
    for every team); its versions are ``EnvironmentVersionModel``. Names are unique per team."""

    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_environments_team_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int | None] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Time)

    team: Mapped[TeamModel | None] = relationship(lazy="joined")


class EnvironmentVersionModel(Base):
    """A version of an environment: its lock (every package pinned with its hashes), the
    Python and platform it was resolved for, and its id (``domain.environments.env_id``), or
    the path of a registered prefix."""

    __tablename__ = "environment_versions"
    __table_args__ = (
        UniqueConstraint("environment_id", "env", name="uq_environment_versions_env"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), index=True
    )
    env: Mapped[str] = mapped_column(String(71), index=True)  # sha256:<hex>
    python: Mapped[str] = mapped_column(String(20))
    platform: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))  # domain.environments.SourceKind
    source: Mapped[str] = mapped_column(Text)  # what it was made from, as given
    lock: Mapped[str | None] = mapped_column(Text)  # None: a registered prefix
    prefix: Mapped[str | None] = mapped_column(Text)
    packages: Mapped[list[str]] = mapped_column(JSON)  # name==version, from the lock
    created_at: Mapped[float] = mapped_column(Time)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))

    environment: Mapped[EnvironmentModel] = relationship(lazy="joined")
    creator: Mapped[UserModel] = relationship(lazy="joined")


class DatasetModel(Base):
    """A named dataset of a team (unique per team); its versions are
    ``DatasetVersionModel``."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_datasets_team_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Time)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))

    team: Mapped[TeamModel] = relationship(lazy="joined")


class DatasetVersionModel(Base):
    """An immutable version of a dataset: its manifest (a blob of the dataset store, named
    by its SHA-256 in hex), what it holds, and who made it from what."""

    __tablename__ = "dataset_versions"
    __table_args__ = (
        UniqueConstraint("dataset_id", "number", name="uq_dataset_versions_dataset_number"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    manifest: Mapped[str] = mapped_column(String(64), index=True)
    file_count: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    blob_count: Mapped[int] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    # the job it was made from (--from-job); a plain id: a version outlives its job
    source_job_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Time)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))

    dataset: Mapped[DatasetModel] = relationship(lazy="joined")
    creator: Mapped[UserModel] = relationship(lazy="joined")


class DatasetBlobModel(Base):
    """A blob of the dataset store that a team holds: one of its members uploaded it (or a
    version was made of it server side). A team's upload skips only the blobs it holds, so
    that no team learns what another team stored; the bytes are kept once all the same."""

    __tablename__ = "dataset_blobs"
    __table_args__ = (UniqueConstraint("team_id", "sha256", name="uq_dataset_blobs_team_sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Time)


class DatasetUseModel(Base):
    """A job's use of a dataset version (resolved at submit), where it is mounted: what
    keeps a version in use from being deleted while the job may still start or run."""

    __tablename__ = "dataset_uses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("dataset_versions.id", ondelete="CASCADE"), index=True
    )
    mount: Mapped[str] = mapped_column(Text)


class VolumeModel(Base):
    """A team's volume: a mutable directory kept on the node, mounted read-write by the
    team's jobs; ``size_limit`` null: only the team's storage quota bounds it."""

    __tablename__ = "volumes"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_volumes_team_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    size_limit: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Time)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))
    # what its directory takes, as the storage scan last measured it (null: not yet)
    used_bytes: Mapped[int | None] = mapped_column(BigInteger)
    used_at: Mapped[float | None] = mapped_column(Time)

    team: Mapped[TeamModel] = relationship(lazy="joined")
    creator: Mapped[UserModel] = relationship(lazy="joined")


class ImageModel(Base):
    """A container image a team holds (or the site: ``team_id`` null, an admin's, for every
    team), by the name it was pulled or imported as; its files are kept once by manifest
    digest in the image store (``services.images``), however many teams hold it."""

    __tablename__ = "images"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_images_team_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int | None] = mapped_column(ForeignKey("teams.id"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    digest: Mapped[str] = mapped_column(String(80), index=True)  # sha256:<hex> of its manifest
    source: Mapped[str] = mapped_column(String(10))  # pull or import
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    # Env, Entrypoint, Cmd and WorkingDir of its config (executors.images.ImageConfig)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Time)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))

    team: Mapped[TeamModel | None] = relationship(lazy="joined")
    creator: Mapped[UserModel] = relationship(lazy="joined")


class ExperimentModel(Base):
    """A hyper-parameter search of a team (``services.experiments``): its spec as submitted,
    where it stands, and how many trials it has made (the next trial's number is one more).
    ``version`` grows with each change, so that the experiments pipeline applies what it
    decided only to the row it read (a user's pause or stop in between wins)."""

    __tablename__ = "experiments"
    __table_args__ = (Index("ix_experiments_team_name", "team_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), index=True)
    reason: Mapped[str | None] = mapped_column(String(50))
    message: Mapped[str | None] = mapped_column(Text)
    trials_made: Mapped[int] = mapped_column(Integer, default=0)
    best_trial: Mapped[int | None] = mapped_column(Integer)  # its number
    best_value: Mapped[float | None] = mapped_column(Float(precision=53))
    version: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Time)
    ended_at: Mapped[float | None] = mapped_column(Time)

    user: Mapped[UserModel] = relationship(lazy="joined")
    team: Mapped[TeamModel] = relationship(lazy="joined")


class TrialModel(Base):
    """One trial of an experiment: its point, the job that runs it, and what was decided.
    ``rungs``: the verdict at each rung it was judged at ({rung: [value, rank, of, keep]}),
    never given twice; ``value`` and ``time``: the objective and the time metric it reported
    last (its curve is its job's metrics)."""

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("experiment_id", "number", name="uq_trials_experiment_number"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), unique=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(20))
    value: Mapped[float | None] = mapped_column(Float(precision=53))
    time: Mapped[float | None] = mapped_column(Float(precision=53))
    rung: Mapped[int | None] = mapped_column(Integer)
    rungs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Time)
    ended_at: Mapped[float | None] = mapped_column(Time)


class SchedulerSettingsModel(Base):
    """One version of the scheduler's live settings (``services.schedsettings``): every knob's
    value (``knobs``, a whole set, never a difference), who made it, when, why, and how
    (``source``: admin, rollback, tune, autotune, watch). Versions are numbered 1, 2, 3 ... by
    their writer (the primary key refuses a second writer of the same number); none: the
    server's environment (``GPUPOOL_*``) gives the settings. ``rollback_of``: the version a
    rollback took its knobs from (0: the environment's). ``prediction``: what a tune expected
    of these settings (its hold-out's figures), for the watch that rolls back."""

    __tablename__ = "scheduler_settings"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    knobs: Mapped[dict[str, Any]] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Time)
    rollback_of: Mapped[int | None] = mapped_column(Integer)
    prediction: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class SchedulerTuneModel(Base):
    """A tuning of the scheduler's settings (``services.tuning``): asked by an admin or by the
    nightly autotune, run by the tuning watch (queued, running, succeeded, failed), its
    options, the report of what it tried and chose, and the version it made when it adopted
    settings. ``checked``: what the rollback watch found a week after that adoption."""

    __tablename__ = "scheduler_tunes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(20), index=True)
    source: Mapped[str] = mapped_column(String(20))
    requested_by: Mapped[str | None] = mapped_column(String(200))
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    decision: Mapped[str | None] = mapped_column(String(20))
    message: Mapped[str | None] = mapped_column(Text)
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    adopted_version: Mapped[int | None] = mapped_column(Integer)
    checked: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Time)
    started_at: Mapped[float | None] = mapped_column(Time)
    ended_at: Mapped[float | None] = mapped_column(Time)
