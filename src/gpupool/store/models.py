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
    ``state``, ``drain`` and ``removed_at`` by ``services.nodes.settle`` only; a removed
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
    # a task of a job array: the array (its first task's job id) and this task's index
    array_id: Mapped[int | None] = mapped_column(ForeignKey("job_arrays.id"))
    array_index: Mapped[int | None] = mapped_column(Integer)

    user: Mapped[UserModel] = relationship(lazy="joined")
    team: Mapped[TeamModel] = relationship(lazy="joined")


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
