"""Job specs (versioned JSON), statuses and reasons."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpupool.domain.code import REF_EXAMPLE, is_ref
from gpupool.domain.datasetrefs import DatasetUse, VolumeUse, check_mounts, check_uses
from gpupool.domain.dependencies import MAX_DEPENDENCIES, Dependency
from gpupool.domain.text import STORABLE, Text, is_stored, stored_context
from gpupool.domain.units import parse_bytes
from gpupool.errors import CodeWithWorkdir, GpuTypeWithoutGpus, InvalidLauncher, InvalidNetwork

SPEC_VERSION = 1
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV = ("GPUPOOL_", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
MAX_PRIORITY = 1000
MAX_GPU_TYPES = 16
MAX_GPU_TYPE_LENGTH = 64
MAX_RUNTIME_SECONDS = 90 * 86400.0
MAX_NODES = 256  # tasks of one job over several nodes
MAX_BYTES = 1024**6  # 1 EiB: beyond any node, and small enough for every number type used
MAX_DATASETS = 16  # datasets one job may read


class JobStatus(StrEnum):
    PENDING = "pending"
    STARTING = "starting"  # attempt recorded, runner being launched
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"  # its runner vanished without an exit record

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES

    @property
    def holds_resources(self) -> bool:
        return self in (JobStatus.STARTING, JobStatus.RUNNING)


FINAL_STATUSES = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.LOST}
)


class JobKind(StrEnum):
    """What a job is to the platform: a batch job, or the workload of a notebook or of a
    deployment's replica (started by those services through the same submit path)."""

    JOB = "job"
    NOTEBOOK = "notebook"
    REPLICA = "replica"
    # an environment's build on one node, CPU only, for jobs of its team that ask for GPUs
    # and wait for it (``services.jobs`` builds first)
    ENV_BUILD = "envbuild"
    # a trial of an experiment (``services.experiments``): its point in GPUPOOL_PARAMS
    TRIAL = "trial"


class StopReason(StrEnum):
    """Why gpupool stopped a running attempt (recorded on the attempt when it asks)."""

    PREEMPTED = "preempted"  # the job goes back to the queue when the attempt ends
    MAX_RUNTIME = "max_runtime"  # the job fails with MaxRuntimeExceeded
    CANCELLED = "cancelled"
    STORAGE_QUOTA = "storage_quota"  # the job fails with StorageQuotaExceeded
    EARLY_STOPPED = "early_stopped"  # a trial its experiment stopped at a rung: cancelled


class Role(StrEnum):
    ADMIN = "admin"  # everything, every team
    MEMBER = "member"  # sees and acts on the jobs of its teams
    VIEWER = "viewer"  # sees the jobs of its teams


def _byte_field(value: Any) -> int | None:
    if value is None:
        return None
    try:
        count = parse_bytes(value)
    except OverflowError:  # Infinity, or more digits than a float can hold
        count = MAX_BYTES + 1
    if count > MAX_BYTES:
        raise ValueError("at most 1 EiB: write a byte quantity like 20GiB, 512MiB or 1.5GB")
    return count


ByteCount = Annotated[int | None, Field(default=None, ge=0)]
MIN_SHM_BYTES = 1024**2  # a /dev/shm below 1 MiB is a typo (tmpfs would take 0 as no limit)
MIN_PIDS = 16  # a job's own limit of tasks: its sandbox's init and a shell fit well under it


class ResourceRequest(BaseModel):
    """What one task asks for.

    ``gpus``: a whole number of GPUs (1, 2, 8), or a fraction of one GPU (0.25, 0.5); leave it
    out (None) for a job without a GPU.
    ``gpu_memory_bytes``: with a fraction or no ``gpus``, the GPU memory to reserve on one
    shared GPU; with whole GPUs, the least memory each GPU must have.
    ``pids``: the most tasks (processes and threads) it may hold at once; None: the node's
    limit (GPUPOOL_JOB_PIDS_MAX), which also caps what a job may ask for.
    """

    model_config = ConfigDict(extra="forbid")

    gpus: float | None = Field(default=None, allow_inf_nan=False)
    gpu_memory_bytes: ByteCount = None
    cpus: float = Field(default=1.0, gt=0, le=4096, allow_inf_nan=False)
    memory_bytes: ByteCount = None
    pids: int | None = Field(default=None, ge=MIN_PIDS, le=2**22, strict=True)

    @field_validator("gpu_memory_bytes", "memory_bytes", mode="before")
    @classmethod
    def _parse_bytes(cls, value: Any) -> int | None:
        return _byte_field(value)

    @field_validator("gpus", "cpus", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpu_count(cls, value: float | None) -> float | None:
        if value is None:
            return None
        if value <= 0:
            raise ValueError(
                "gpus must be more than 0 (1, 2 or a fraction like 0.5); leave it out to run "
                "without a GPU"
            )
        if value > 1 and value != int(value):
            raise ValueError(
                "a fraction of a GPU cannot be combined with more than one GPU: ask for a whole "
                "number of GPUs (2, 4) or a fraction of one GPU (0.25, 0.5)"
            )
        if value > 1024:
            raise ValueError("gpus must be at most 1024")
        return value

    @property
    def gpu_count(self) -> float:
        """The GPUs asked for as a number: 0 when none."""
        return self.gpus or 0.0

    @property
    def whole_gpus(self) -> int:
        return int(self.gpu_count) if self.gpu_count >= 1 else 0

    @property
    def is_fractional(self) -> bool:
        """True when the task shares one GPU (a fraction, or GPU memory alone)."""
        return (0 < self.gpu_count < 1) or (self.gpu_count == 0 and bool(self.gpu_memory_bytes))

    @property
    def uses_gpus(self) -> bool:
        return self.gpu_count > 0 or bool(self.gpu_memory_bytes)


def check_env(value: dict[str, str]) -> dict[str, str]:
    """A job's environment as its user sets it: valid names, none that gpupool sets."""
    for name in value:
        if not ENV_NAME.match(name):
            raise ValueError(
                f"'{name}' is not a valid environment variable name: use letters, digits "
                "and _, not starting with a digit"
            )
        if name.startswith(RESERVED_ENV[0]) or name in RESERVED_ENV[1:]:
            raise ValueError(f"'{name}' is set by gpupool and cannot be overridden")
    if len(value) > 1000:
        raise ValueError("at most 1000 environment variables")
    return value


def clean_gpu_types(value: list[str]) -> list[str]:
    """GPU types stripped, each 1-64 characters; duplicates (ignoring case) dropped, order
    kept."""
    kept: dict[str, str] = {}
    for raw in value:
        name = raw.strip()
        if not name or len(name) > MAX_GPU_TYPE_LENGTH:
            raise ValueError(
                f"a GPU type is 1-{MAX_GPU_TYPE_LENGTH} characters, part of a GPU model "
                "name such as A100 or H100-80GB"
            )
        kept.setdefault(name.lower(), name)
    return list(kept.values())


def check_gpu_types_need_gpus(gpu_types: list[str], resources: ResourceRequest | None) -> None:
    """A GPU type chooses among GPUs, so work that asks for none cannot have one (it would
    run without a GPU). ``resources`` None: they failed validation themselves."""
    if not gpu_types or resources is None or resources.uses_gpus:
        return
    raise PydanticCustomError(
        GpuTypeWithoutGpus.code,
        "a GPU type picks among the GPUs a job asks for, and this job asks for none: add "
        "--gpus 1 (or a share such as 0.5; resources.gpus in the API) or --gpu-memory "
        "20GiB (resources.gpu_memory_bytes), or leave the GPU type out",
    )


def checked_gpu_types(value: list[str], info: ValidationInfo) -> list[str]:
    """``gpu_types`` of work that runs as a job: cleaned, and refused when the ``resources``
    validated before them ask for no GPU (not for a spec stored before this rule)."""
    value = clean_gpu_types(value)
    if not is_stored(info):
        check_gpu_types_need_gpus(value, info.data.get("resources"))
    return value


# the fields of a request that becomes a job's spec (a job's, a notebook's, a replica's)
JobEnv = Annotated[dict[Text, Text], AfterValidator(check_env)]
GpuTypes = Annotated[list[Text], Field(max_length=MAX_GPU_TYPES), AfterValidator(checked_gpu_types)]


class JobSpec(BaseModel):
    """A job as its user submitted it; stored as versioned JSON.

    ``preemptible``: the scheduler may stop it (SIGTERM, grace, SIGKILL) and requeue it when
    another team reclaims its guarantee or a more urgent job needs the GPUs.
    ``gpu_types``: GPU models it may run on, each matched case-insensitively as part of the
    model name ("a100" matches "NVIDIA A100-SXM4-80GB"); empty: any.
    ``max_runtime_seconds``: a running attempt is stopped, and the job fails, after this.
    ``grace_period_seconds``: between SIGTERM and SIGKILL when stopped (default: the
    server's ``stop_grace_seconds``; at most its ``max_grace_seconds``).
    """

    model_config = ConfigDict(extra="forbid")

    version: int = SPEC_VERSION
    name: Annotated[str, Field(max_length=200), STORABLE] | None = None
    command: list[Text] = Field(min_length=1, max_length=4096)
    env: JobEnv = Field(default_factory=dict)
    workdir: Annotated[str, Field(max_length=4096), STORABLE] | None = None
    code: str | None = Field(
        default=None,
        description="a code snapshot to run in (uploaded with PUT /api/v1/code/{ref}): "
        "unpacked read-write as the job's working directory; not with workdir",
        examples=[REF_EXAMPLE],
    )
    resources: ResourceRequest = Field(default_factory=ResourceRequest)
    team: Annotated[str, Field(max_length=100), STORABLE] | None = None
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    preemptible: bool = True
    gpu_types: GpuTypes = Field(default_factory=list)
    max_runtime_seconds: float | None = Field(
        default=None, gt=0, le=MAX_RUNTIME_SECONDS, allow_inf_nan=False
    )
    grace_period_seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # -- a job over several nodes (a gang: all its tasks start together, or none) ---------
    nodes: int = Field(
        default=1,
        ge=1,
        le=MAX_NODES,
        description="tasks of the job, each on a node of its own with `resources` (per node)",
    )
    launcher: Literal["torch", "tensorflow", "mpi"] | None = Field(
        default=None,
        description="what each task starts: torch (torchrun's variables, one process per "
        "GPU), tensorflow (TF_CONFIG), mpi (mpirun on the first task); none: the command as is",
    )
    launcher_mode: Literal["per-gpu", "torchrun", "per-node", "chief", "mpirun"] | None = Field(
        default=None,
        description="the launcher's mode. torch: per-gpu (the default: a process per GPU), "
        "torchrun (one torchrun per node) or per-node (the command as is, once per node, "
        "with the variables of Kubeflow's PyTorchJob: for a command that runs torchrun "
        "itself); tensorflow: chief (the first node is the chief, the others workers; "
        "default: all workers); mpi: mpirun (the command is the mpirun line itself, run on "
        "the first node against gpupool's hostfile; default: gpupool writes it)",
    )
    procs_per_node: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="processes (ranks) each node runs, with a launcher: torch per-gpu (one "
        "per GPU by default; WORLD_SIZE is nodes x this), torchrun (--nproc-per-node), "
        "per-node (PET_NPROC_PER_NODE), mpi (slots per node); 1 for tensorflow. With whole "
        "GPUs it divides their count or is a multiple of it",
    )
    allow_cross_fabric: bool = Field(
        default=False,
        description="a multi-node job may span fabric groups (slower links between them)",
    )
    # a task lost with its node (or a node's failure) requeues the job this many times
    retries: int = Field(default=0, ge=0, le=100)
    listen: bool = Field(
        default=False,
        description="the job serves on a port: its executor gives it a free TCP port on its "
        "node in PORT (and GPUPOOL_LISTEN_HOST, the address to bind: the node's address), and "
        "the platform's proxy reaches it there",
    )
    network: Literal["isolated", "host"] | None = Field(
        default=None,
        description="isolated: a network namespace of the job's own (its own loopback, egress "
        "through a user-space NAT; nothing else on the node reaches its ports, and it reaches "
        "none of the node's); host: the node's network, where an admin allows it "
        "(GPUPOOL_ALLOW_HOST_NETWORK). Default: isolated on one node, host for a job over "
        "several nodes (NCCL and RDMA need the node's interfaces)",
    )
    workspace: bool = Field(
        default=False,
        description="run in the submitter's workspace: a directory of their own on the node "
        "(the one their notebooks use), kept across jobs, shown read-write in the sandbox; "
        "the working directory unless workdir or code is given",
    )
    model: str | None = Field(
        default=None,
        description="a registered model version's files (its archive, as 'gpupool model show' "
        "lists it), shown to the job read-only in GPUPOOL_MODEL_DIR; the version must be of "
        "the job's team",
        examples=[REF_EXAMPLE],
    )
    environment: Annotated[str, Field(max_length=200), STORABLE] | None = Field(
        default=None,
        description="a Python environment of the job's team (gpupool env ls): NAME (its "
        "newest version) or NAME@ID; recorded as NAME@sha256:<hex> when submitted. Its "
        "python comes first on PATH, read-only; a node builds it the first time one of its "
        "jobs needs it (reason EnvBuilding)",
        examples=["torch-2-4", "torch-2-4@3f9a1c2b"],
    )
    image: Annotated[str, Field(max_length=255), STORABLE] | None = Field(
        default=None,
        description="a container image of the job's team or the site (gpupool image ls), by "
        "name or digest: the job runs with the image's tree as its sandbox's read-only root, "
        "its Env under the job's env, its Entrypoint before the command and its WorkingDir "
        "when the job has no workdir; recorded by digest in image_digest when submitted",
        examples=["registry.example.org/team/pytorch:2.4"],
    )
    image_digest: str | None = Field(
        default=None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="set by the server at submit: the digest of the image's manifest",
    )
    depends_on: list[Dependency] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="jobs of its team that must end first, each with a condition (afterok: "
        "succeeded, the default; afterany: ended; afternotok: ended without succeeding); "
        "a job or the short form 'afterok:12', '12' or a name (the newest job of that name in "
        "the team). Recorded as ids; until they end the job waits with reason Dependency, and "
        "it is cancelled (DependencyNeverSatisfied) when one ends so that it never can start",
        examples=[["afterok:12"], [{"job": "prep", "condition": "afterany"}]],
    )
    hold: bool = Field(
        default=False,
        description="submit the job held: it stays pending (reason Held) and never starts "
        "until released (gpupool release JOB, POST /api/v1/jobs/{id}/release)",
    )
    datasets: list[DatasetUse] = Field(
        default_factory=list,
        max_length=MAX_DATASETS,
        description="datasets of the job's team it reads: NAME, NAME:VERSION, NAME:/MOUNT or "
        "NAME:VERSION:/MOUNT (or objects). The version (the latest when none is given) is "
        "recorded at submit; the job sees exactly it, read-only, at /datasets/NAME unless a "
        "mount is given, and GPUPOOL_DATASET_<NAME> says where",
        examples=[["imagenet:3", "captions:/data/captions"]],
    )
    volumes: list[VolumeUse] = Field(
        default_factory=list,
        max_length=MAX_DATASETS,
        description="volumes of the job's team it mounts read-write: NAME:/MOUNT (or "
        "objects); a volume is the team's directory on the node, kept across jobs, counted "
        "in its storage quota; GPUPOOL_VOLUME_<NAME> says where",
        examples=[["scratch:/scratch"]],
    )
    shm_bytes: ByteCount = Field(
        default=None,
        description="the size of the sandbox's /dev/shm (a tmpfs), e.g. 2GiB: at least 1MiB, "
        "at most the job's memory when it asks for some (resources.memory_bytes); default: "
        "the tmpfs's own (half the node's memory), counted in the job's memory as it fills",
        examples=["2GiB"],
    )

    @field_validator("shm_bytes", mode="before")
    @classmethod
    def _parse_shm(cls, value: Any) -> int | None:
        return _byte_field(value)

    @field_validator("shm_bytes")
    @classmethod
    def _shm_fits(cls, value: int | None, info: ValidationInfo) -> int | None:
        """/dev/shm's pages are the job's memory: no bigger than the memory it asked for."""
        if value is None or is_stored(info):
            return value
        if value < MIN_SHM_BYTES:
            raise ValueError("/dev/shm takes at least 1MiB: write a size like 512MiB or 2GiB")
        resources = info.data.get("resources")
        memory = resources.memory_bytes if resources is not None else None
        if memory is not None and value > memory:
            raise ValueError(
                f"/dev/shm ({value} bytes) cannot be larger than the job's memory ({memory} "
                "bytes), which its files there count in: ask for more memory (--memory) or a "
                "smaller --shm-size"
            )
        return value

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SPEC_VERSION:
            raise ValueError(f"spec version {value} is not known; this server reads version 1")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the command is empty: give the program to run, e.g. -- python x.py")
        return value

    @field_validator("datasets")
    @classmethod
    def _dataset_mounts(cls, value: list[DatasetUse]) -> list[DatasetUse]:
        return check_uses(value)

    @model_validator(mode="after")
    def _mounts_apart(self) -> JobSpec:
        if self.volumes:
            check_mounts(self.datasets, self.volumes)
        return self

    @field_validator("code")
    @classmethod
    def _code_ref(cls, value: str | None) -> str | None:
        if value is not None and not is_ref(value):
            raise ValueError(
                "a code snapshot is named sha256: and the 64 lower-case hex digits of its "
                "archive's SHA-256, as PUT /api/v1/code/{ref} stored it"
            )
        return value

    @field_validator("model")
    @classmethod
    def _model_ref(cls, value: str | None) -> str | None:
        if value is not None and not is_ref(value):
            raise ValueError(
                "a model version's files are named sha256: and the 64 lower-case hex digits "
                "of their archive's SHA-256, as 'gpupool model show NAME:VERSION' lists them"
            )
        return value

    @classmethod
    def stored(cls, data: Any) -> JobSpec:
        """A spec read back from the database: it was valid when it was submitted, so rules
        added since (such as ``Text``'s) are not applied to it again."""
        return cls.model_validate(data, context=stored_context())

    @model_validator(mode="after")
    def _image_alone(self) -> JobSpec:
        """A Python environment is built for the node's system, not for an image's."""
        if self.image is not None and self.environment is not None:
            raise PydanticCustomError(
                "invalid_request",
                "a job runs in a container image (image, --image) or with a Python environment "
                "(environment), not both: install the packages into the image, or leave it out",
            )
        return self

    @model_validator(mode="after")
    def _code_or_workdir(self) -> JobSpec:
        """The code snapshot is the job's working directory, so a job has one or the other."""
        if self.code is not None and self.workdir:
            raise PydanticCustomError(
                CodeWithWorkdir.code,
                "a job runs in its code snapshot (code, gpupool run --code) or in a working "
                "directory on the node (workdir), not both: leave one out",
            )
        return self

    @model_validator(mode="after")
    def _launcher_fits(self) -> JobSpec:
        """A launcher's mode and procs_per_node need the launcher; MPI needs whole GPUs (one
        rank per GPU). Refused as a validation error of code invalid_launcher (the API's
        422)."""
        if self.launcher is None and (self.launcher_mode or self.procs_per_node):
            what = "launcher_mode" if self.launcher_mode else "procs_per_node"
            raise PydanticCustomError(
                InvalidLauncher.code,
                f"{what} is for a job with a launcher: add one (gpupool run --launcher torch, "
                f"tensorflow or mpi), or leave {what} out",
            )
        if self.launcher is not None:
            from gpupool.domain.launchers import check_request, parse_launcher

            try:
                launcher = parse_launcher(self.launcher, self.launcher_mode, self.procs_per_node)
                check_request(launcher, self.resources.gpu_count, self.command)
            except InvalidLauncher as error:  # a validation error, as every other field's
                raise PydanticCustomError(InvalidLauncher.code, error.message) from None
        return self

    @property
    def is_gang(self) -> bool:
        return self.nodes > 1 or self.launcher is not None

    @property
    def network_mode(self) -> str:
        """The network the job gets: its own, unless it asked for the node's or spans
        nodes."""
        return self.network or ("host" if self.nodes > 1 else "isolated")

    @model_validator(mode="after")
    def _network_fits(self) -> JobSpec:
        """A job over several nodes talks to its other tasks over the nodes' own network."""
        if self.network == "isolated" and self.nodes > 1:
            raise PydanticCustomError(
                InvalidNetwork.code, " ".join(InvalidNetwork().message.split())
            )
        return self

    @model_validator(mode="after")
    def _display_name(self) -> JobSpec:
        if self.name is not None and not self.name.strip():
            self.name = None
        return self


class Reason(StrEnum):
    """Machine-readable reasons carried by pending jobs and events."""

    SUBMITTED = "Submitted"
    QUEUED = "Queued"
    NO_NODES = "NoNodes"
    INSUFFICIENT_GPUS = "InsufficientGpus"
    INSUFFICIENT_GPU_MEMORY = "InsufficientGpuMemory"
    INSUFFICIENT_CPU = "InsufficientCpu"
    INSUFFICIENT_MEMORY = "InsufficientMemory"
    WAITING_FOR_HIGHER_PRIORITY = "WaitingForHigherPriority"
    NO_NODE_BIG_ENOUGH = "NoNodeBigEnough"
    NO_GPU_OF_TYPE = "NoGpuOfType"
    OVER_QUOTA = "OverQuota"  # the team is at its limit
    ARRAY_LIMIT = "ArrayLimit"  # its array runs as many tasks as its %N allows
    NOT_GUARANTEED = "NotGuaranteed"  # non-preemptible work beyond the team's guarantee
    FAIR_SHARE = "WaitingForFairShare"  # others come first by fair share
    RESERVED = "Reserved"  # the spot it fits is held for a blocked, earlier job
    PREEMPTING = "Preempting"  # waiting for the jobs it preempted to stop
    PREEMPTED = "Preempted"
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
    CHECKPOINTED = "Checkpointed"
    PLACED = "Placed"
    STARTED = "Started"
    NOTEBOOK_STOPPED = "NotebookStopped"  # its notebook was stopped (idle, or by a user)
    LAUNCH_FAILED = "LaunchFailed"
    EXITED = "Exited"
    CANCEL_REQUESTED = "CancelRequested"
    CANCELLED = "Cancelled"
    LOST = "RunnerLost"
    REQUEUED = "Requeued"
    READOPTED = "Readopted"
    HELD = "Held"  # held (JobSpec.hold, gpupool hold): it never starts until released
    RELEASED = "Released"  # released from a hold (gpupool release)
    FABRIC = "Fabric"  # what a task of a job over several nodes talks over (RDMA, TCP)
    # tenancy (README "Isolation")
    ISOLATION_UNAVAILABLE = "IsolationUnavailable"  # isolation is on and cannot be had
    GPU_MEMORY_EXCEEDED = "GpuMemoryExceeded"  # over its GPU memory share for too long
    MEMORY_EXCEEDED = "MemoryExceeded"  # killed by the kernel over its host memory limit
    PIDS_EXCEEDED = "PidsExceeded"  # stopped at its limit of tasks (a fork bomb)
    LIMITS_NOT_ENFORCED = "LimitsNotEnforced"  # the node cannot hold it to what it asked
    NO_EGRESS = "NoEgress"  # its own network has no way out (no pasta, no routable interface)
    GPUS_FENCED = "GpusFenced"  # runner gone, processes remain: its GPUs stay reserved
    STORAGE_FULL = "StorageFull"  # the node's disk was full when it was to start
    STORAGE_QUOTA_EXCEEDED = "StorageQuotaExceeded"  # its team's files passed its quota
    ENV_BUILDING = "EnvBuilding"  # started: its node builds its Python environment first
    DATASET_FETCHING = "DatasetFetching"  # started: its node materialises its datasets first
    DEPENDENCY = "Dependency"  # waits for jobs it depends on to end (JobSpec.depends_on)
    EARLY_STOPPED = "EarlyStopped"  # a trial its experiment stopped early (at a rung)
    DEPENDENCY_NEVER_SATISFIED = "DependencyNeverSatisfied"  # one ended so it never can start
    # submitted from a Kubeflow manifest: the fields of it gpupool does not honour
    KUBEFLOW_FIELD_IGNORED = "KubeflowFieldIgnored"
