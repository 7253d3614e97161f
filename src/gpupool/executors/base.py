"""The executor contract (after JupyterHub's spawner): start / stop / poll / get_state / load_state.

An executor launches the runner of one attempt of one job and reports what it observes. It
makes no scheduling decisions. Handles round-trip through JSON so that a restarted server
re-adopts running work instead of losing it. What it is asked to run and what a poll reports
(``TaskSpec``, ``PollResult``) are plain data in ``executors.task``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.domain.code import CodeLimits
from gpupool.domain.endpoints import Endpoint, RelayTarget, port
from gpupool.domain.isolation import IsolationStatus
from gpupool.errors import NoModelFiles
from gpupool.executors.gang import planned
from gpupool.executors.outputs import Writable
from gpupool.executors.task import PollResult, TaskSpec
from gpupool.executors.usage import NodeFiles
from gpupool.runner.layout import METRICS_FILE


@dataclass(frozen=True)
class Capabilities:
    multi_node: bool = False
    fractional_gpus: bool = True


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

    def holdings(self) -> dict[str, dict[str, int]]:
        """What each node keeps of what jobs fetch before they start (node -> key -> bytes:
        its environments, dataset versions and images, ``executors.holdings``), for placement
        that prefers a node holding a job's; a node missing from the answer did not say
        (nothing, for an executor without such caches)."""
        return {}

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

    def endpoint(self, handle: Handle) -> Endpoint | None:
        """Where the attempt listens (a job with ``listen``), as the platform reaches it;
        None when it does not listen. Read from the handle alone: no call to a node."""
        return None

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


def listening(state: dict[str, Any]) -> Endpoint | None:
    """The endpoint an executor recorded in a handle's state when it started the attempt:
    ``host`` and ``port``; ``socket``, the runner's socket, for a workload with a network of
    its own; ``relay``, its node agent's relay to that socket (a pool's node). None without
    a valid port or host, or with a relay that is not one (never the address instead: that
    is the workload's own loopback)."""
    found, host = port(state.get("port")), state.get("host")
    if found is None or not isinstance(host, str) or not host:
        return None
    if "relay" in state:
        relay = RelayTarget.from_json(state["relay"])
        return None if relay is None else Endpoint(host, found, relay=relay)
    socket = state.get("socket")
    return Endpoint(
        host, found, socket if isinstance(socket, str) and socket.startswith("/") else None
    )
