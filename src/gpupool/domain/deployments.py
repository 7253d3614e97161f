"""Deployments: a served model as a desired state, its replicas, keys and read models.

A deployment asks for ``replicas`` copies of one workload (a model version's files served by
the built-in server, or the user's own command) behind the platform's proxy at
``/serve/NAME/...``. The server reconciles it (``gpupool.loops.rollouts``, by the rules of
``gpupool.services.deployments``): each replica is a slot that runs one replica job at a
time; a job that ends is replaced, a replica that fails its health checks is stopped and
replaced, and an update rolls replica by replica.
This module holds the rules and the read models; it does no I/O.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpupool.domain.jobs import GpuTypes, JobEnv, ResourceRequest
from gpupool.domain.text import STORABLE, Text
from gpupool.domain.views import View

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
NAME_RULE = (
    "a deployment's name is 1 to 100 letters, digits, '.', '_' or '-', starting with a "
    "letter or a digit: it is its address, /serve/NAME/..."
)
MAX_REPLICAS = 64
KEY_PREFIX = "gpd"  # a deployment key: told apart from an API token (gpt_) at a glance
HEALTH_PATH = "/health"
# The secret a replica is started with (in its environment), and the header in which the
# platform's proxy and health checks send it: a replica answers only those who know it.
REPLICA_TOKEN_ENV = "GPUPOOL_REPLICA_TOKEN"
REPLICA_TOKEN_HEADER = "X-Gpupool-Replica-Token"
_NAME = re.compile(NAME_PATTERN)
_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]{0,499}$")


def is_deployment_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.match(value) is not None


class ReplicaState(StrEnum):
    """Where a replica stands. Only READY replicas get traffic."""

    PENDING = "pending"  # its job waits for the scheduler, or is being started
    STARTING = "starting"  # its job runs; no health check has passed yet
    READY = "ready"  # its last health check passed: routed to
    UNHEALTHY = "unhealthy"  # ready once, its health checks fail now: not routed to
    RESTARTING = "restarting"  # its job ended; a new one starts after a back-off
    DRAINING = "draining"  # retired: routed no more, its job is being stopped
    STOPPED = "stopped"  # retired, its job ended

    @property
    def routed(self) -> bool:
        return self is ReplicaState.READY


LIVE_STATES = frozenset(
    {
        ReplicaState.PENDING,
        ReplicaState.STARTING,
        ReplicaState.READY,
        ReplicaState.UNHEALTHY,
        ReplicaState.RESTARTING,
    }
)


class DeploymentReason(StrEnum):
    """Machine-readable reasons of what happened to a deployment (its events)."""

    CREATED = "Created"
    SCALED = "Scaled"
    UPDATE_STARTED = "UpdateStarted"
    UPDATE_DONE = "UpdateDone"
    UPDATE_FAILED = "UpdateFailed"
    REPLICA_STARTED = "ReplicaStarted"
    REPLICA_READY = "ReplicaReady"
    REPLICA_EXITED = "ReplicaExited"
    REPLICA_UNHEALTHY = "ReplicaUnhealthy"
    REPLICA_RETIRED = "ReplicaRetired"
    SUBMIT_FAILED = "SubmitFailed"
    STOPPED = "Stopped"


class ReplicaTemplate(BaseModel):
    """What each replica runs, as stored with the deployment (versioned JSON)."""

    model_config = ConfigDict(extra="forbid")

    command: list[Text] | None = None
    env: dict[Text, Text] = Field(default_factory=dict)
    resources: ResourceRequest = Field(default_factory=ResourceRequest)
    gpu_types: list[Text] = Field(default_factory=list)
    health_path: str = HEALTH_PATH
    # its Python environment, pinned when the deployment was made (NAME@sha256:<hex>)
    environment: str | None = None


class DeploymentSpec(BaseModel):
    """A new deployment, as a user asks for it.

    ``model`` (and ``version``, the latest when left out): a registered model of the team,
    whose files each replica finds read-only in ``GPUPOOL_MODEL_DIR``. ``command``: what a
    replica runs (it must listen on ``$GPUPOOL_LISTEN_HOST:$PORT``); without one, the
    built-in server (``python -m gpupool.serving``) serves the model. A deployment needs a
    model, a command, or both. ``name``: its address, ``/serve/NAME/...``; the model's name
    when left out.
    """

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=100), STORABLE] | None = None
    model: Annotated[str, Field(max_length=100), STORABLE] | None = None
    version: int | None = Field(default=None, ge=1, le=2**31 - 1)
    team: Annotated[str, Field(max_length=100), STORABLE] | None = None
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    command: list[Text] | None = Field(default=None, min_length=1, max_length=4096)
    env: JobEnv = Field(default_factory=dict)
    resources: ResourceRequest = Field(default_factory=ResourceRequest)
    gpu_types: GpuTypes = Field(
        default_factory=list,
        description="GPU models its replicas may run on (as a job's gpu_types)",
    )
    health_path: str = Field(
        default=HEALTH_PATH,
        description="what the server GETs on each replica; a 2xx answer means healthy",
    )
    environment: Annotated[str, Field(max_length=200), STORABLE] | None = Field(
        default=None,
        description="a Python environment of the team (NAME or NAME@ID: gpupool env ls) its "
        "replicas' command runs in; pinned to the version it names when the deployment is "
        "made (the built-in server runs gpupool's own Python either way)",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not is_deployment_name(value):
            raise ValueError(NAME_RULE)
        return value

    @field_validator("health_path")
    @classmethod
    def _health_path(cls, value: str) -> str:
        if not _PATH.match(value):
            raise ValueError("a health path starts with '/' and holds no spaces, e.g. /health")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value[0].strip():
            raise ValueError("the command is empty: give the program to run")
        return value

    def template(self) -> ReplicaTemplate:
        return ReplicaTemplate(
            command=self.command,
            env=self.env,
            resources=self.resources,
            gpu_types=self.gpu_types,
            health_path=self.health_path,
            environment=self.environment,
        )


class ScaleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(ge=1, le=MAX_REPLICAS)


class UpdateRequest(BaseModel):
    """Serve another version of the deployment's model (the latest when left out)."""

    model_config = ConfigDict(extra="forbid")

    version: int | None = Field(default=None, ge=1, le=2**31 - 1)


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=100), STORABLE] = "key"


# -- read models -----------------------------------------------------------------------------


class TrafficView(View):
    """Requests through the proxy since the server started (kept in memory): how many, how
    many failed (5xx or unreachable), and their latency in milliseconds."""

    requests: int = 0
    errors: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None


class ReplicaView(View):
    id: int
    generation: int
    version: int | None
    job_id: int | None
    node: str | None
    state: ReplicaState
    restarts: int
    failures: int
    created_at: float
    ready_at: float | None
    message: str | None
    traffic: TrafficView = TrafficView()
    waiting_reason: str | None = Field(
        default=None, description="why its job waits to start (as 'gpupool why JOB' says)"
    )
    waiting_message: str | None = None


class DeploymentEventView(View):
    id: int
    at: float
    reason: str
    message: str


class DeploymentView(View):
    id: int
    name: str
    team: str
    user: str
    model: str | None
    version: int | None
    replicas: int = Field(description="replicas asked for")
    ready: int = Field(description="replicas answering their health checks now")
    state: str = Field(description="running, updating or stopped")
    url: str = Field(description="its address on this server")
    team_url: str = Field(
        description="its address naming its team (/serve/NAME@TEAM/): the one to use where "
        "several of your teams have a deployment of this name"
    )
    command: list[str] | None
    resources: ResourceRequest
    health_path: str
    environment: str | None = None  # NAME@sha256:<hex>: what its command runs in
    reason: str | None
    message: str | None
    created_at: float
    updated_at: float
    stopped_at: float | None


class DeploymentDetailView(DeploymentView):
    rolling_from_version: int | None = None
    replica_list: list[ReplicaView]
    events: list[DeploymentEventView]
    traffic: TrafficView


class KeyView(View):
    id: int
    deployment: str
    name: str
    prefix: str
    created_at: float
    created_by: str
    revoked: bool


class KeyCreatedView(KeyView):
    key: str = Field(description="shown once; store it now")


def serve_url(name: str, team: str | None = None) -> str:
    """A deployment's address: ``/serve/NAME/``, or ``/serve/NAME@TEAM/`` naming its team
    (a name holds no '@': the first one ends it)."""
    if team is None:
        return f"/serve/{name}/"
    return f"/serve/{name}@{quote(team, safe='')}/"


def split_address(address: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME@TEAM`` (the first path segment after /serve/) as (name, team)."""
    name, at, team = address.partition("@")
    return name, (team if at else None)
