"""The executor contract (after JupyterHub's spawner): start / stop / poll / get_state / load_state.

An executor launches the runner of one attempt of one job and reports what it observes. It
makes no scheduling decisions. Handles round-trip through JSON so that a restarted server
re-adopts running work instead of losing it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from gpupool.domain.code import CodeLimits
from gpupool.domain.isolation import IsolationStatus
from gpupool.errors import NoModelFiles
from gpupool.executors.outputs import Writable
from gpupool.executors.usage import NodeFiles
from gpupool.runner.layout import METRICS_FILE


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
    # -- one task of a job over several nodes (a gang), or of a launcher ------------------
    task_index: int = 0
    task_count: int = 1
    node_address: str = "127.0.0.1"  # how the gang's other nodes reach this task's node
    gpu_indices: tuple[int, ...] = ()  # its GPUs' indices on the node (launchers' ranks)
    launcher: str | None = None  # torch, tensorflow, mpi (JobSpec's)
    launcher_mode: str | None = None
    # what the task starts (a domain.launchers.TaskLaunch as JSON), filled in by the
    # executor that launches the gang: run by gpupool.runner.ranks inside the sandbox
    launch: dict[str, Any] | None = None
    # the task serves on a port (JobSpec.listen): its executor picks one free on the node at
    # start, gives it as PORT (and the address to bind as GPUPOOL_LISTEN_HOST) and keeps
    # both in the handle's state ("port", "host") for the proxy (services.endpoints)
    listen: bool = False
    # the task runs in its user's workspace (JobSpec.workspace): a directory of that user's
    # on the node, kept across jobs, that the executor resolves and the sandbox shows
    workspace: bool = False
    # "isolated": a network namespace of its own, reached only through its runner's socket
    # (executors.listening); "host": the node's network (a gang over several nodes)
    network: str = "host"

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


@dataclass(frozen=True)
class Capabilities:
    multi_node: bool = False
    fractional_gpus: bool = True


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


@dataclass
class Handle:
    """What an executor needs to find its attempt again. ``state`` is JSON-serialisable."""

    job_id: int
    attempt: int
    state: dict[str, Any] = field(default_factory=dict)


class LaunchError(Exception):
    """The attempt could not be launched.

    ``user_message`` is what the user sees, ``str(self)`` what the operator's log gets and
    ``reason`` a short label for metrics.
    """

    def __init__(self, log_message: str, *, user_message: str, reason: str) -> None:
        super().__init__(log_message)
        self.user_message = user_message
        self.reason = reason


class Executor(ABC):
    """Runs attempts. ``stop`` is idempotent; ``poll`` never blocks for long."""

    capabilities = Capabilities()

    @abstractmethod
    def start(self, task: TaskSpec) -> Handle:
        """Launch the attempt; raise LaunchError if it cannot start."""

    def start_gang(self, tasks: list[TaskSpec]) -> Handle:
        """Launch every task of one attempt of a job over several nodes, or none of them
        (LaunchError). One machine runs a gang of one task (a launcher's processes)."""
        if len(tasks) > 1:
            raise LaunchError(
                "this executor runs jobs of one node",
                user_message="a job over several nodes needs a pool (gpupool server --ray)",
                reason="not_multi_node",
            )
        from gpupool.executors.gang import planned

        return self.start(planned(tasks, rendezvous_port=free_local_port())[0])

    @abstractmethod
    def stop(self, handle: Handle, grace_seconds: float) -> None:
        """Ask the attempt to end: SIGTERM to its process group, then SIGKILL after grace."""

    @abstractmethod
    def poll(self, handle: Handle) -> PollResult:
        """Report what the attempt is doing now."""

    def poll_all(self, handles: list[Handle]) -> list[PollResult]:
        """``poll`` of each handle, in order (an executor may ask its nodes once for all)."""
        return [self.poll(handle) for handle in handles]

    @abstractmethod
    def log_path(self, handle: Handle) -> Path:
        """The file that holds the attempt's combined stdout and stderr."""

    def metrics_path(self, handle: Handle) -> Path:
        """The attempt's metric records as its runner keeps them (``[name, step, time,
        value]`` per line), beside its log: on the server's disk, or its copy there."""
        return self.log_path(handle).with_name(METRICS_FILE)

    def isolation(self) -> IsolationStatus | None:
        """How this executor keeps jobs apart, and whether it may run them now; None for an
        executor without a sandbox of its own (the fakes of the tests)."""
        return None

    def node_files(self, jobs: dict[int, bool], users: set[str]) -> NodeFiles:
        """What nodes other than the server's own disk hold of these jobs' directories (job
        id -> finished) and these users' workspaces: a pool's nodes, walked by their agents;
        nothing for one machine, whose files the server walks itself."""
        return NodeFiles()

    def checkpoint_at(self, handle: Handle) -> float | None:
        """When the attempt's job last wrote into its checkpoint directory (the newest
        modification time of an entry there), or None when it holds nothing (or this
        executor cannot tell). The directory is the job's, shared by all its attempts."""
        return None

    def pack_outputs(
        self, job_id: int, node: str | None, path: str, limits: CodeLimits, into: Writable
    ) -> None:
        """Write the job's outputs below ``path`` (on ``node``, where it ran) into ``into`` as
        a model version's archive (``gpupool.executors.outputs.pack``). NoModelFiles when this
        executor keeps no outputs."""
        raise NoModelFiles("this server keeps no outputs of its jobs")

    def get_state(self, handle: Handle) -> dict[str, Any]:
        return {"job_id": handle.job_id, "attempt": handle.attempt, "state": handle.state}

    def load_state(self, state: dict[str, Any]) -> Handle:
        return Handle(job_id=state["job_id"], attempt=state["attempt"], state=state["state"])

    def recover(self, job_id: int, attempt: int, node: str | None = None) -> Handle | None:
        """A handle for an attempt recorded but never confirmed launched (the server died in
        between), or None when it never launched: then it never will, and may be retried.
        ``node``: where it was to run."""
        return None

    def change_fd(self) -> int | None:
        """A file descriptor that becomes readable when some attempt may have changed, so the
        control loop can wait on it instead of polling fast; None when there is none."""
        return None

    def clear_changes(self) -> None:  # noqa: B027 - optional hook
        """Consume the pending change notifications."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the executor's own resources; running attempts are not touched."""

    def release(self, handle: Handle) -> None:  # noqa: B027 - optional hook
        """Forget an ended attempt (reap processes, close files)."""


def free_local_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` (an address of this machine) now: a rendezvous, or where a
    task that listens serves."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
