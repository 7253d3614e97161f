"""What an executor is asked to run and what it reports: one attempt's task (``TaskSpec``,
with its GPU grants), its JSON form as a pool's node receives it, and what a poll observes.

Plain data that the executor contract (``executors.base``) and the gangs
(``executors.gang``) both use; it imports neither.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class GpuGrant:
    """The part of one GPU (or MIG device) an attempt was given: its compute share in (0, 1]
    and the GPU memory it may use there (held to it when the share is below 1)."""

    uuid: str
    share: float = 1.0
    memory_bytes: int = 0


@dataclass(frozen=True)
class TaskSpec:
    """One attempt of one job, as the executor must launch it.

    ``user``: the gpupool user who submitted it; ``unix_user``: the Unix account that user
    is mapped to (None: the node's default); ``cpus`` and ``memory_bytes``: what it asked
    for, held as limits where the node can; ``gpu_grants``: its share of each GPU.
    ``code``: the job's code snapshot (``sha256:<hex>``), to unpack as its working directory
    (``workdir`` is None then), and ``code_archive``: the archive's path on the server, which
    an executor reads (or ships to the node) and unpacks with ``executors.code.unpack_once``.
    """

    job_id: int
    attempt: int
    node: str
    command: list[str]
    env: dict[str, str]
    workdir: str | None
    gpu_uuids: list[str]  # -> CUDA_VISIBLE_DEVICES; empty: no GPU visible
    log_limit_bytes: int
    stop_grace_seconds: float
    user: str = ""
    unix_user: str | None = None
    cpus: float | None = None
    memory_bytes: int | None = None
    pids: int | None = None  # its own limit of tasks (None: the node's, GPUPOOL_JOB_PIDS_MAX)
    gpu_grants: tuple[GpuGrant, ...] = ()
    code: str | None = None
    code_archive: str | None = None
    # a model version's files (``JobSpec.model``), unpacked like ``code`` but shown to the
    # job read-only (GPUPOOL_MODEL_DIR); ``model_archive``: the archive's path on the server
    model: str | None = None
    model_archive: str | None = None
    # a Python environment (``JobSpec.environment``, resolved): {"id", "name", "python",
    # "lock"} or {"id", "name", "prefix"}; the node builds it once (executors.environments)
    environment: dict[str, Any] | None = None
    # a container image (``JobSpec.image``, resolved): {"digest": sha256:<hex>, "layout": the
    # server's OCI layout of it}; the node unpacks it once (executors.images) and the sandbox
    # shows its tree as the read-only root
    image: dict[str, Any] | None = None
    # -- one task of a job over several nodes (a gang), or of a launcher ------------------
    task_index: int = 0
    task_count: int = 1
    node_address: str = "127.0.0.1"  # how the gang's other nodes reach this task's node
    gpu_indices: tuple[int, ...] = ()  # its GPUs' indices on the node (launchers' ranks)
    launcher: str | None = None  # torch, tensorflow, mpi (JobSpec's)
    launcher_mode: str | None = None
    procs_per_node: int | None = None  # processes (ranks) of each task (JobSpec's)
    # what the task starts (a domain.launchers.TaskLaunch as JSON), filled in by the
    # executor that launches the gang: run by gpupool.runner.ranks inside the sandbox
    launch: dict[str, Any] | None = None
    # the task serves on a port (JobSpec.listen): its executor picks one free on the node at
    # start, gives it as PORT (and the address to bind as GPUPOOL_LISTEN_HOST) and keeps
    # both in the handle's state ("port", "host") for the proxy (services.jobs's endpoints)
    listen: bool = False
    # the task runs in its user's workspace (JobSpec.workspace): a directory of that user's
    # on the node, kept across jobs, that the executor resolves and the sandbox shows
    workspace: bool = False
    # "isolated": a network namespace of its own, reached only through its runner's socket
    # (executors.listening); "host": the node's network (a gang over several nodes)
    network: str = "host"
    # the datasets it reads (JobSpec.datasets, resolved): each {"name", "version", "mount",
    # "manifest" (hex), "store" (the dataset store, where the node reads the blobs), and
    # "s3" when an S3-compatible store keeps them instead (its endpoint, bucket, prefix and
    # region; no credentials: the node fetches with its own)}; the node materialises each
    # version once into its cache (executors.datasets) and the sandbox shows it read-only
    # at "mount"
    datasets: tuple[dict[str, Any], ...] = ()
    # the size of its sandbox's /dev/shm (JobSpec.shm_bytes; None: tmpfs's default)
    shm_bytes: int | None = None
    # the volumes it mounts read-write (JobSpec.volumes): each {"name", "mount", "id",
    # "store" (the server's volumes directory: on a pool, a path every node shares)}; the
    # volume is the directory ``store``/id (the node's own volumes directory without store)
    volumes: tuple[dict[str, Any], ...] = ()

    @property
    def in_gang(self) -> bool:
        return self.task_count > 1 or self.launcher is not None


def task_to_json(task: TaskSpec) -> dict[str, Any]:
    """The task as JSON, as the server sends it to a node's agent."""
    return asdict(task)


def task_from_json(data: dict[str, Any]) -> TaskSpec:
    """The task ``task_to_json`` wrote."""
    grants = tuple(GpuGrant(**grant) for grant in data.get("gpu_grants") or ())
    return TaskSpec(**{**data, "gpu_grants": grants})


class Observed(StrEnum):
    STARTING = "starting"  # launched, the workload has not started yet
    RUNNING = "running"
    EXITED = "exited"
    # the runner is gone, and processes of its workload remain: they are being killed, and
    # the attempt keeps its GPUs until they are gone (never handed out while still in use)
    ORPHANED = "orphaned"
    LOST = "lost"  # the runner is gone, left no exit record, and nothing of it remains


@dataclass(frozen=True)
class PollResult:
    observed: Observed
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    message: str | None = None
    # why gpupool ended it, when it did (a domain Reason's value: "GpuMemoryExceeded")
    reason: str | None = None
    # what the node could not enforce for this attempt (CPU, memory, GPU memory limits)
    notes: tuple[str, ...] = ()
