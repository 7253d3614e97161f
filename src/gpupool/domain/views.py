"""Read models: what the API, the web UI and users' scripts are shown of each resource.

Services build these while their transaction is open and return them; the API answers with
them as they are (they are its response models), so no database row leaves a service. They
are frozen: a view is a record of what was read, not something to change.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from gpupool.domain.experiments import TrialStandingView
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.jobs import JobKind, JobSpec, JobStatus, Role
from gpupool.domain.nodes import NodeState
from gpupool.domain.readmodel import View
from gpupool.domain.text import ShownText, readable


def _stored_spec(value: Any) -> Any:
    """A spec from the database, shown even if it breaks a rule added after it was stored,
    with any NUL or lone surrogate replaced (no JSON encoder takes a lone surrogate)."""
    return JobSpec.stored(readable(value)) if isinstance(value, dict) else value


StoredSpec = Annotated[JobSpec, BeforeValidator(_stored_spec)]


# -- jobs ---------------------------------------------------------------------------------------


class GpuShareView(View):
    uuid: str
    share: float
    memory_bytes: int


class PlacementView(View):
    node: str
    gpus: list[GpuShareView]
    cpus: float
    memory_bytes: int
    held: list[str] = Field(
        default_factory=list,
        description="what its node held already of what the job fetches before it starts "
        "(env:ID, dataset:MANIFEST, image:DIGEST): placement prefers such a node",
    )
    tasks: list[TaskPlacementView] | None = Field(
        default=None,
        description="a job over several nodes: each task's placement (the first's is above)",
    )


class TaskPlacementView(View):
    task: int
    node: str
    gpus: list[GpuShareView]
    cpus: float
    memory_bytes: int
    held: list[str] = Field(
        default_factory=list, description="what this task's node held already (as above)"
    )


class JobView(View):
    """A job; ``position`` and ``blockers`` while it waits and the scheduler has said why."""

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
    placement: PlacementView | None
    preemptible: bool
    attained_gpu_seconds: float = Field(
        description="GPU-seconds received by all its attempts, a running one up to now"
    )
    queued_at: float | None = Field(description="when it last (re)entered the queue")
    checkpoint_at: float | None = Field(description="newest file in its checkpoint directory")
    preemptions: int
    array_id: int | None = Field(None, description="the job array it is a task of")
    array_index: int | None = Field(None, description="its index in that array (ID_INDEX)")
    kind: JobKind = Field(
        JobKind.JOB, description="job, or the workload of a notebook or a deployment's replica"
    )


class EventView(View):
    id: int
    at: float
    reason: str
    message: ShownText


class AttemptView(View):
    number: int
    node: str
    status: str
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    stop_reason: str | None = Field(description="preempted, max_runtime or cancelled")


class CodeView(View):
    """A code snapshot: its name (``sha256:<hex>`` of the archive), the archive's size, and
    the files (and their bytes) it unpacks to."""

    ref: str
    size_bytes: int
    files: int
    unpacked_bytes: int


class CodeLimitsView(View):
    """What the server takes of one code snapshot: the archive's bytes (an upload over it is
    refused with 413 code_too_large), the bytes of its files, its files and directories."""

    max_bytes: int
    max_unpacked_bytes: int
    max_entries: int


class JobDetailView(JobView):
    events: list[EventView]
    attempts_detail: list[AttemptView]
    code_snapshot: CodeView | None = Field(
        None, description="the code snapshot it runs in (spec.code), when it has one"
    )


class JobStateView(View):
    """Where a job stands, as a log stream announces it."""

    status: JobStatus
    reason: str | None
    message: ShownText | None
    exit_code: int | None


class ArrayView(View):
    """A job array as one: each of its tasks is a job of its own (list them with
    ``GET /jobs?array=ID``); task ``N`` of array ``ID`` is written ``ID_N``."""

    id: int = Field(description="the array's id: the job id of its first task")
    name: ShownText | None
    user: str
    team: str
    spec: StoredSpec = Field(description="the spec of every task")
    submitted_at: float
    indexes: str = Field(description="its indexes as sbatch writes them: 0-999, 1,3,5-7")
    size: int = Field(description="its tasks")
    max_running: int | None = Field(description="the most tasks that run at once; null: all")
    counts: dict[str, int] = Field(description="its tasks by status")


class SubmittedArrayView(ArrayView):
    job_ids: list[int] = Field(description="its tasks' job ids, in the order of their indexes")


class LogChunkView(View):
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


class SubmitOptionsView(View):
    """What a user may choose when submitting: teams, GPU models, priorities, grace periods."""

    teams: list[str] = Field(description="the teams it may submit to")
    own_teams: list[str] = Field(description="the teams it is a member of")
    gpu_models: list[str] = Field(description="the GPU models of the pool's nodes")
    min_priority: int
    max_priority: int = Field(description="the highest priority its role may use")
    admin_max_priority: int
    default_grace_seconds: float
    max_grace_seconds: float
    viewer: bool = Field(description="a viewer: it may not submit")


# -- why a job waits, the queue ------------------------------------------------------------------


class EstimateView(View):
    """How an estimated start time was made: always an estimate, never a promise."""

    is_estimate: bool = True
    computed_at: float = Field(description="when the simulation ran (epoch seconds)")
    duration_seconds: float | None = Field(description="how long this job is assumed to run")
    duration_basis: str | None = Field(
        description="max_runtime, user_median, team_median or default"
    )
    duration_text: str | None
    assumes: list[str] = Field(description="what every estimate assumes, in words")


class WhyView(View):
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
    estimate: EstimateView | None = None
    trial: TrialStandingView | None = Field(
        default=None, description="a trial's standing in its experiment: its rung verdicts"
    )


class QueuedJobView(View):
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


class QueueTeamView(View):
    team: str
    jobs: list[QueuedJobView]


class QueueView(View):
    """Pending jobs by team, each team's queue in order; start times are estimates."""

    computed_at: float | None
    assumes: list[str]
    waiting: int = Field(description="jobs waiting in all (the teams list the first ones)")
    teams: list[QueueTeamView]


# -- nodes -------------------------------------------------------------------------------------


class HolderView(View):
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


class CpuHolderView(View):
    """A job holding CPUs (and host memory) of a node; a job of a team the caller is not in
    shows only what it holds (``other_team`` true; its id, name, user and team null)."""

    job_id: int | None
    job_name: ShownText | None
    user: str | None
    team: str | None
    cpus: float
    memory_bytes: int
    other_team: bool = False


class GpuView(View):
    uuid: str
    index: int
    model: str
    memory_bytes: int
    used_share: float
    used_memory_bytes: int
    utilization_percent: float | None
    holders: list[HolderView]
    domain: int = Field(
        description="connectivity domain: GPUs of one domain share NVLink, a PCIe switch or a "
        "NUMA node, and a multi-GPU task gets GPUs of one domain when it can"
    )


class NodeUsageView(View):
    """What a node's starting and running jobs hold, against what it offers; each share is
    held / offered (0 where it offers none)."""

    gpus_held: float = Field(description="GPU shares held (0.5: half of one GPU)")
    gpus: int = Field(description="its GPUs (a MIG instance counts as one)")
    gpu_share: float
    cpus_held: float
    cpus: int
    cpu_share: float
    memory_held_bytes: int
    memory_bytes: int
    memory_share: float


class TopologyView(View):
    """How a node's GPUs reach each other and its RDMA devices, as ``nvidia-smi topo -m``
    names it: a row per physical GPU, a column per GPU and then per RDMA device."""

    gpus: list[int] = Field(description="physical GPU indexes: the rows, and the first columns")
    nics: list[str] = Field(description="RDMA devices some GPU's affinity names: last columns")
    cells: list[list[str]] = Field(
        description="per row: 'X' (the GPU itself), NV# (NVLink, # links), PIX, PXB, PHB, "
        "NODE or SYS; '' where the inventory says nothing"
    )
    reported: bool = Field(description="the inventory names at least one link or affinity")


class NodeView(View):
    name: str
    schedulable: bool = Field(
        description="new work may be placed here: the node is up, not drained, not removed"
    )
    state: NodeState = Field(description="up; down: the cluster lost it")
    drain: bool = Field(description="an admin drained it: no new work; what runs goes on")
    drain_reason: ShownText | None
    joined_at: float | None = Field(description="when it last joined (or joined again)")
    down_at: float | None
    address: str | None = Field(description="how the pool's other nodes reach it")
    fabric_group: str | None = Field(
        description="the fabric it is on, as it said when it joined: nodes of one group reach "
        "each other over it (an InfiniBand or RoCE island)"
    )
    last_seen_at: float
    cpus: int
    memory_bytes: int
    gpus: list[GpuView]
    inventory: NodeInventory
    usage: NodeUsageView
    topology: TopologyView
    cpu_holders: list[CpuHolderView] = Field(
        default_factory=list,
        description="the jobs holding its CPUs, most first (who a job waiting on "
        "InsufficientCpu waits for); another team's job shows only what it holds",
    )


class NodeEventView(View):
    """A change to a node: ``reason`` a NodeChange (Drained, NodeDown, ...), ``actor`` the
    admin who made it (null: the cluster)."""

    at: float
    reason: str
    message: ShownText
    actor: str | None


class NodeDetailView(NodeView):
    events: list[NodeEventView] = Field(description="its latest changes, oldest first")


class NodeRemovedView(View):
    name: str
    removed_at: float


class ModelCountView(View):
    """The pool's GPUs of one model."""

    model: str
    gpus: int
    in_use: float = Field(description="GPU shares held by starting and running jobs")
    free: float = Field(description="GPU shares free on schedulable nodes")


class PoolSummaryView(View):
    """The pool at a glance. Nodes: ``up`` (and not drained), ``drained`` (up, drained) and
    ``down`` add up to ``nodes``. GPUs: only those of schedulable nodes are ``free``; those
    of drained or down nodes that no job holds are ``unavailable``."""

    nodes: int
    up: int
    drained: int
    down: int
    gpus: int
    in_use: float
    free: float
    unavailable: float
    by_model: list[ModelCountView]


class FabricGroupView(View):
    """The nodes of one fabric group (``name`` null: nodes that named none)."""

    name: str | None
    gpus: int
    nodes: list[NodeView]


class PoolView(View):
    """The nodes page: the pool's summary and its nodes by fabric group, by name; the
    nodes of no fabric group last."""

    summary: PoolSummaryView
    groups: list[FabricGroupView]


# -- teams, users, tokens, who is asking --------------------------------------------------------


class TeamUsageView(View):
    gpus: float = Field(description="GPUs its starting and running jobs hold")
    by_model: dict[str, float]


class TeamStorageView(View):
    quota: int | None = Field(description="the most bytes its files may take; null: no quota")
    used: int | None = Field(
        description="bytes its files (jobs' directories, notebook workspaces, model and code "
        "archives) took at the last scan; null: not scanned yet"
    )
    scanned_at: float | None = Field(description="when they were last summed")
    over: bool = Field(description="over its quota: its jobs are stopped, uploads refused")


class TeamView(View):
    id: int
    name: str
    guarantee: dict[str, float]
    limit: float | None
    weight: float
    usage: TeamUsageView
    pending: int = Field(description="its jobs waiting to start")
    admins: list[str] = Field(
        default_factory=list, description="its team admins: they add and remove its members"
    )
    storage: TeamStorageView = Field(
        default_factory=lambda: TeamStorageView(quota=None, used=None, scanned_at=None, over=False)
    )


class TeamDeletedView(View):
    name: str
    finished_jobs: int = Field(description="its finished jobs, whose records are kept")


class TeamSeriesView(View):
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


class TeamHistoryView(View):
    """Each team's GPUs over time, bucket by bucket (``times``: each bucket's start)."""

    start: float
    end: float
    bucket_seconds: float
    pool_gpus: float
    times: list[float]
    teams: list[TeamSeriesView]


class UserView(View):
    id: int
    name: str
    role: Role
    teams: list[str]
    disabled: bool
    has_password: bool
    weight: float
    unix_user: str | None
    admin_of: list[str] = Field(default_factory=list, description="the teams it is an admin of")


class TokenView(View):
    id: int
    user: str
    name: str
    prefix: str
    created_at: float
    last_used_at: float | None
    expires_at: float | None
    revoked: bool


class TokenCreatedView(TokenView):
    token: str = Field(description="shown once; store it now")


class WhoAmIView(View):
    user: str
    role: Role
    teams: list[str]
    admin_of: list[str] = Field(default_factory=list, description="the teams you are an admin of")
    csrf_token: str | None = None


class HealthView(View):
    """What anyone may ask without signing in: the server answers, and in Ray mode whether
    its cluster does (the details are in ClusterView, for signed-in users)."""

    status: str = Field(default="ok", description='"ok": the server answers')
    version: str
    cluster: str | None = Field(
        default=None, description='"reachable" or "unreachable": the Ray pool (Ray mode only)'
    )


class ClusterView(View):
    """The pool's engine: one machine ("local") or a Ray cluster ("ray"), and its health."""

    mode: str = Field(description='"local" (one machine) or "ray" (a pool of nodes)')
    reachable: bool = Field(description="the Ray cluster answers (always true for local)")
    problem: str | None = Field(default=None, description="why it does not, when it does not")
    unreachable_since: float | None = None
    nodes_up: list[str] = Field(default_factory=list)
    address: str | None = Field(default=None, description="the Ray head's address (admins)")
    join_command: str | None = Field(
        default=None, description="what a new machine runs to join the pool (admins)"
    )


class JoinView(View):
    """What a joining machine gets for the right join token: the head and the pool's secret."""

    ray_address: str
    ray_token: str
    health_period_ms: int
    health_failures: int
    object_store_bytes: int
    node_lost_seconds: float
    node_up: bool | None = Field(
        default=None, description="the node named in the request is up in the pool"
    )
    node_schedulable: bool | None = Field(
        default=None, description="the scheduler may place work on it"
    )
