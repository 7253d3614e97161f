"""The node agent: one per node, a detached Ray actor pinned to it (made by the bridge).

It runs the node's jobs with the same local executor, runner and sandbox as a single
machine, with the attempt records on the node's own disk (its ``data_dir``), so nothing
about running a job differs between one machine and a pool. It answers in JSON-ready dicts
only. It outlives the server: a restarted server asks it again about the attempts it
recorded, and the agent finds their runners by pid and start time, as the local executor
does after a restart.

It serves several calls at once (a threaded actor, ``MAX_CONCURRENCY``): a start, the
polls of a pass, a stop and a log read of the server do not queue behind each other, nor
behind ``changes``, the server's long wait for its runners' next change. What the calls
share, the local executor's records of its attempts, is used under one lock, held only for
the executor's own (short) work.

Its settings are the ``GPUPOOL_*`` variables of the node's Ray processes, which
``gpupool node join`` (or the server, for the head's machine) sets: the node's name, data
directory and declared inventory.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import secrets
import select
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpupool.cluster import relay
from gpupool.discovery import discover_node
from gpupool.domain.code import CodeLimits
from gpupool.errors import GpupoolError
from gpupool.executors import images, outputs
from gpupool.executors.base import Handle, LaunchError
from gpupool.executors.environments import NodeEnvironments
from gpupool.executors.isolation import Isolation
from gpupool.executors.local import LAUNCH_DIR, WORKSPACES, LocalExecutor, default_base_env
from gpupool.executors.task import PollResult, TaskSpec, task_from_json
from gpupool.executors.usage import FilesScan
from gpupool.runner import layout
from gpupool.settings import Settings

log = logging.getLogger(__name__)

LOG_CHUNK = 1024**2  # the most log bytes one call returns
PACK_CHUNK = 8 * 1024**2  # the most bytes of a packed model version one call returns
STALE_PACK_SECONDS = 86400.0  # a pack this old was never fetched: its server died
# calls served at once (Ray's threads of the actor): a pass's polls, launches in flight, a
# stop, log reads and the server's wait for changes; the bridge makes the actor with it
MAX_CONCURRENCY = 16
CHANGES_WAIT_MAX_S = 30.0  # the longest one ``changes`` call waits


class NodeAgent:
    """What the server asks of a node, through the bridge. Methods take and return JSON-ready
    values; a launch that fails returns ``{"error": {...}}`` rather than raising, so that
    the server tells a refused launch from a lost node."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.isolation = Isolation(self.settings)
        self.executor = LocalExecutor(
            self.settings.jobs_dir,
            base_env=_job_base_env(),
            isolation=self.isolation,
            model_limits=self.settings.model_limits(),
            listen_host=None,  # a task on the node's network binds its node's address
            socket_listeners=True,  # reached through its runner's socket, by the relay
            environments=NodeEnvironments(self.settings),  # built on this node, by its runners
            dataset_cache=self.settings.dataset_cache_dir,  # this node's own versions
            dataset_cache_max_bytes=self.settings.dataset_cache_max_bytes,
        )
        self.started_at = time.time()
        self.inventory_data: dict[str, Any] | None = None
        self.files: FilesScan | None = None  # the storage scan's walker, made when first asked
        # the server reaches a serving attempt's socket through it (cluster/relay.py); started
        # with the first such attempt, or at once by an agent that Ray restarted
        self.relay = relay.open_kept(self._relay_record(), self.settings.jobs_dir, None)
        # the platform's API for the node's jobs with a network of their own (as api.sock
        # on one machine): the server says where it is with each start
        self.api: relay.ApiForward | None = None
        self._forward_api(None)
        # the local executor's records (its runners, adopted processes, state files read) are
        # not made for threads: every call that uses them holds this lock
        self._executor_lock = threading.Lock()
        self._setup_lock = threading.Lock()  # the relay, the API's forward, the walker
        self._storage_lock = threading.Lock()
        self.changed = Changes(self.executor)

    # -- the node ------------------------------------------------------------------------------

    def hello(self) -> dict[str, Any]:
        """Who this agent is: its node, pid, start time and data directory."""
        return {
            "node": self.settings.node_name,
            "pid": os.getpid(),
            "started_at": self.started_at,
            "data_dir": str(self.settings.data_dir),
        }

    def inventory(self) -> dict[str, Any]:
        """Discover the node (the same discovery as one machine) and return its inventory."""
        found = discover_node(self.settings)
        self.isolation.devices.update(found)
        self.inventory_data = found.model_dump(mode="json")
        return self.inventory_data

    def fabric(self, address: str | None) -> dict[str, Any]:
        """The node's fabric group: declared (GPUPOOL_FABRIC_GROUP), else derived from its
        RDMA ports or the subnet of ``address`` (how the other nodes reach it)."""
        from gpupool.domain.fabric import fabric_group
        from gpupool.domain.inventory import NodeInventory

        found = NodeInventory.model_validate(self.inventory_data or self.inventory())
        group = fabric_group(found, _node_address(address), self.settings.fabric_group)
        return group.model_dump(mode="json")

    def free_port(self) -> int:
        """A TCP port free on this node now: a gang's rendezvous (its first task's node)."""
        import socket

        with socket.socket() as sock:
            sock.bind((self.settings.host, 0))
            return sock.getsockname()[1]

    def isolation_status(self) -> dict[str, Any] | None:
        status = self.executor.isolation()
        return status.model_dump(mode="json") if status is not None else None

    # -- attempts ------------------------------------------------------------------------------

    def start(self, task: dict[str, Any]) -> dict[str, Any]:
        task = dict(task)
        data = task.pop("code_archive_data", None)
        if data is not None:  # the job's code, sent along: kept on this node by its hash
            task["code_archive"] = str(self._keep_archive(task["code"], data))
        model = task.pop("model_archive_data", None)
        if model is not None:  # a model version's files, sent along the same way
            task["model_archive"] = str(self._keep_archive(task["model"], model, "models"))
        fabric = self._nccl(task) if task.get("launch") and task.get("task_count", 1) > 1 else None
        api = task.pop("api_address", None)
        try:
            with self._setup_lock:
                if api is not None and (self.api is None or self.api.address != tuple(api)):
                    self._forward_api((str(api[0]), int(api[1])))
                if task.get("listen"):
                    self._open_relay(task.get("node_address"))
            spec = task_from_json(task)
            self._unpack_image(spec)
            with self._executor_lock:
                handle = self.executor.start(spec)
        except LaunchError as error:
            return {
                "error": {
                    "log": str(error),
                    "user_message": error.user_message,
                    "reason": error.reason,
                }
            }
        return {"state": handle.state, "fabric": fabric, **self._reached(handle)}

    def _unpack_image(self, spec: TaskSpec) -> None:
        """The task's image unpacked in this node's image cache (once per node: see
        ``images.unpack_once``) before its start takes the executor's lock, so that the
        minute a big image takes holds up none of the node's polls and other starts. A
        failure is left for the start, which meets it again and says it as on one machine."""
        if spec.image is None or not self.isolation.enabled:
            return
        layout_dir = Path(str(spec.image.get("layout") or ""))
        with contextlib.suppress(images.ImageError, OSError):
            images.unpack_once(layout_dir, str(spec.image.get("digest")), self.executor.image_cache)

    def _open_relay(self, address: str | None) -> None:
        """The relay, on the node's ``address`` as the pool has it, before a task that
        listens starts: LaunchError when it cannot listen (the task is not started)."""
        if self.relay is not None:
            return
        host = address or self.settings.host
        try:
            self.relay = relay.open_kept(self._relay_record(), self.settings.jobs_dir, host)
        except OSError as e:
            raise LaunchError(
                f"the node agent's relay cannot listen on {host}: {e}",
                user_message=f"node {self.settings.node_name} could not open its relay on {host}",
                reason="no_port",
            ) from e

    def _reached(self, handle: Handle) -> dict[str, Any]:
        """``{"relay": ...}``: how the server reaches an attempt that serves through its
        runner's socket (this agent's relay, the attempt's key); nothing for another."""
        if "socket" not in handle.state or self.relay is None:
            return {}
        return {"relay": self.relay.target(handle.job_id, handle.attempt).to_json()}

    def _relay_record(self) -> Path:
        return self.settings.data_dir / "cluster" / "relay.json"

    def _forward_api(self, address: tuple[str, int] | None) -> None:
        """Serve the API's socket for the node's jobs, forwarded to the server at
        ``address`` (None: where an agent before this one forwarded it)."""
        cluster = self.settings.data_dir / "cluster"
        if self.api is not None:
            self.api.close()
        try:
            self.api = relay.open_api_forward(cluster / "api.json", cluster / "api.sock", address)
        except OSError as e:  # its jobs then run without the API on their loopback
            log.warning("cannot serve the platform's API to this node's jobs: %s", e)
            self.api = None
        # the port a job finds it at: the server's own, as on one machine
        self.isolation.api = (self.api.address[1], str(self.api.path)) if self.api else None

    def _nccl(self, task: dict[str, Any]) -> str | None:
        """NCCL's settings for a task of a job over several nodes, from this node's NICs
        close to its GPUs, as defaults of its processes; the sentence for its events."""
        from gpupool.domain.fabric import nccl_settings
        from gpupool.domain.inventory import NodeInventory

        found = NodeInventory.model_validate(self.inventory_data or self.inventory())
        index_of = {gpu.uuid: gpu.index for gpu in found.gpus}
        indices = [index_of[uuid] for uuid in task.get("gpu_uuids") or [] if uuid in index_of]
        try:
            nccl = nccl_settings(found, indices, _node_address(task.get("node_address")))
        except ValueError as error:
            log.warning("no NCCL settings for job %s: %s", task.get("job_id"), error)
            return None
        for process in task["launch"]["processes"]:
            process["env_defaults"] = {**nccl.env, **(process.get("env_defaults") or {})}
        return f"task {task.get('task_index', 0)} on {self.settings.node_name} {nccl.summary}"

    def poll(
        self, handles: list[dict[str, Any]], released: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """The state of each attempt, with its log's size (the server copies what is new);
        first, the attempts of ``released`` are forgotten (as ``release``): the server sends
        the ended attempts it let go with its next poll, not one call each."""
        local = [_handle(raw) for raw in handles]
        with self._executor_lock:
            for raw in released or ():
                self.executor.release(_handle(raw))
            results = [self.executor.poll(handle) for handle in local]
        answers = []
        for handle, result in zip(local, results, strict=True):
            sizes = {"log_size": self._log_size(handle), "metrics_size": self._metrics_size(handle)}
            answers.append({**poll_to_json(result), **sizes})
        return answers

    def changes(self, seen: int, wait_seconds: float) -> int:
        """Wait until a runner of this node has said that an attempt changed since the count
        ``seen`` (what the last call returned), at most ``wait_seconds``; the count now. The
        server waits here instead of polling on a timer: its next poll then finds the change.
        A count that is not ``seen`` returns at once (a restarted agent counts from 0)."""
        return self.changed.wait(seen, min(wait_seconds, CHANGES_WAIT_MAX_S))

    def stop(self, handle: dict[str, Any], grace_seconds: float) -> None:
        with self._executor_lock:
            self.executor.stop(_handle(handle), grace_seconds)

    def release(self, handle: dict[str, Any]) -> None:
        with self._executor_lock:
            self.executor.release(_handle(handle))

    def recover(self, job_id: int, attempt: int) -> dict[str, Any] | None:
        """The attempt's handle state if it was launched here, with its launch plan when it
        is a gang's task (``launch``): the server rebuilds the gang from its tasks' plans;
        with ``relay`` for one that serves through its runner's socket."""
        with self._executor_lock:
            handle = self.executor.recover(job_id, attempt)
        if handle is None:
            return None
        plan = self.executor.job_dir(job_id) / "outputs" / LAUNCH_DIR / f"attempt-{attempt}.json"
        launch = layout.read_json(plan)
        found = handle.state | ({"launch": launch} if launch is not None else {})
        return found | self._reached(handle)

    def checkpoint_at(self, handle: dict[str, Any]) -> float | None:
        with self._executor_lock:
            return self.executor.checkpoint_at(_handle(handle))

    def held(self) -> dict[str, int]:
        """What this node's caches hold of environments, dataset versions and images (key
        -> bytes, ``executors.holdings``), for placement that prefers it."""
        return self.executor.held()  # directory listings only: no executor record is read

    def storage(self, jobs: dict[str, bool], users: list[str]) -> dict[str, Any]:
        """What this node's disk holds of these jobs' directories (id -> finished: a
        finished one is walked once) and users' workspaces, for the teams' storage quotas."""
        wanted = {int(job_id): bool(done) for job_id, done in jobs.items()}
        with self._setup_lock:
            if self.files is None:
                self.files = FilesScan(self.settings.jobs_dir, self.settings.data_dir / WORKSPACES)
        with self._storage_lock:  # the walker keeps what it walked: one scan at a time
            return self.files.measure(wanted, users).to_json()

    def read_log(
        self, handle: dict[str, Any], offset: int, metrics: bool = False
    ) -> dict[str, Any]:
        """Up to ``LOG_CHUNK`` bytes of the attempt's log (with ``metrics``: its metric
        records) from ``offset`` (base64)."""
        data = b""
        local = _handle(handle)
        path = self.executor.metrics_path(local) if metrics else self.executor.log_path(local)
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as log_file:
            log_file.seek(offset)
            data = log_file.read(LOG_CHUNK)
        return {"data": base64.b64encode(data).decode("ascii"), "offset": offset}

    # -- model versions: a job's outputs, packed here and fetched by the server -------------

    def pack_outputs(self, job_id: int, path: str, limits: dict[str, int]) -> dict[str, Any]:
        """Pack the job's outputs below ``path`` into a file of this node's data directory,
        for the server to read (``read_pack``) and remove (``drop_pack``): ``{"pack", "size"}``,
        or ``{"error": {...}}`` when the files are refused (a link leading outside, ...)."""
        name = secrets.token_hex(16)
        target = self._packs() / f"{name}.tar.gz"
        try:
            with open(target, "xb") as file:
                self.executor.pack_outputs(job_id, None, path, CodeLimits(**limits), file)
        except GpupoolError as error:
            target.unlink(missing_ok=True)
            return {"error": outputs.error_to_json(error)}
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return {"pack": name, "size": target.stat().st_size}

    def read_pack(self, pack: str, offset: int) -> dict[str, Any]:
        """Up to ``PACK_CHUNK`` bytes of a pack from ``offset`` (base64)."""
        with open(self._pack_path(pack), "rb") as file:
            file.seek(offset)
            data = file.read(PACK_CHUNK)
        return {"data": base64.b64encode(data).decode("ascii")}

    def drop_pack(self, pack: str) -> None:
        self._pack_path(pack).unlink(missing_ok=True)

    def _packs(self) -> Path:
        """Where packs wait to be fetched; one left by a server that died is removed later."""
        directory = self.settings.data_dir / "models" / "outgoing"
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        cutoff = time.time() - STALE_PACK_SECONDS
        for stale in directory.glob("*.tar.gz"):
            with contextlib.suppress(OSError):
                if stale.stat().st_mtime < cutoff:
                    stale.unlink()
        return directory

    def _pack_path(self, pack: str) -> Path:
        if len(pack) != 32 or any(c not in "0123456789abcdef" for c in pack):
            raise ValueError(f"not a pack's name: {pack!r}")
        return self.settings.data_dir / "models" / "outgoing" / f"{pack}.tar.gz"

    def _keep_archive(self, ref: str, data: str, kind: str = "code") -> Path:
        """The archive of ``ref`` in this node's data directory, written once (atomically)."""
        path = self.settings.data_dir / kind / "sha256" / f"{ref.removeprefix('sha256:')}.tar.gz"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(base64.b64decode(data))
            os.replace(tmp, path)
        return path

    def _log_size(self, handle: Handle) -> int:
        try:
            return os.stat(self.executor.log_path(handle)).st_size
        except OSError:
            return 0

    def _metrics_size(self, handle: Handle) -> int:
        try:
            return os.stat(self.executor.metrics_path(handle)).st_size
        except OSError:
            return 0


class Changes:
    """Counts what the node's runners announce through the executor's change FIFO (a byte
    each time one rewrites an attempt's state file), for ``NodeAgent.changes``. Its thread,
    the FIFO's only reader, starts with the first wait."""

    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor
        self.count = 0
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    def wait(self, seen: int, timeout: float) -> int:
        with self._condition:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="gpupool-agent-changes", daemon=True
                )
                self._thread.start()
            self._condition.wait_for(lambda: self.count != seen, timeout)
            return self.count

    def _watch(self) -> None:
        fd = self.executor.change_fd()
        while True:
            ready, _, _ = select.select([fd], [], [])
            if ready:
                self.executor.clear_changes()
                with self._condition:
                    self.count += 1
                    self._condition.notify_all()


def poll_to_json(result: PollResult) -> dict[str, Any]:
    data = asdict(result)
    data["observed"] = result.observed.value
    data["notes"] = list(result.notes)
    return data


def _handle(raw: dict[str, Any]) -> Handle:
    return Handle(job_id=raw["job_id"], attempt=raw["attempt"], state=raw["state"])


def _job_base_env() -> dict[str, str]:
    """What a job inherits from the node: never a Ray or gpupool variable (the pool's secret
    is named by one)."""
    return {
        name: value
        for name, value in default_base_env().items()
        if not name.startswith(("RAY_", "GPUPOOL_"))
    }


def _node_address(address: str | None) -> Any:
    """The NIC that holds ``address`` on this node, with its prefix length (None: unknown)."""
    import ipaddress
    import socket

    import psutil

    from gpupool.domain.fabric import NodeAddress

    if not address:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        for found in addresses:
            if found.family in (socket.AF_INET, socket.AF_INET6) and found.address == address:
                netmask = found.netmask or ""
                try:
                    prefix = ipaddress.ip_network(f"{address}/{netmask}", strict=False).prefixlen
                except ValueError:
                    prefix = 32 if found.family == socket.AF_INET else 128
                return NodeAddress(address=address, prefix_length=prefix, interface=name)
    return None
