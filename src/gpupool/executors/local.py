"""Runs attempts on this machine, each under its own runner (``python -m gpupool.runner``).

On-disk layout under ``jobs_dir``::

    <job_id>/checkpoints/            shared by the job's attempts (GPUPOOL_CHECKPOINT_DIR)
    <job_id>/outputs/                shared by the job's attempts (GPUPOOL_OUTPUT_DIR)
    <job_id>/code/                   its code snapshot, unpacked once: the attempts' workdir
    <job_id>/attempts/<attempt>/     one attempt; files described in gpupool.runner.layout

The runner is started in its own session, so it and the workload survive a server restart;
a restarted server re-adopts them from ``Handle.state`` (``load_state``) and finds them by
pid plus create time, and reads their fate from state.json.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from gpupool.domain.code import CodeLimits
from gpupool.domain.datasetrefs import env_name, volume_env_name
from gpupool.domain.endpoints import Endpoint
from gpupool.domain.isolation import IsolationStatus
from gpupool.errors import GpupoolError
from gpupool.executors import code as archives
from gpupool.executors import holdings, images, outputs
from gpupool.executors.base import Executor, Handle, LaunchError, listening
from gpupool.executors.environments import NodeEnvironments
from gpupool.executors.isolation import Isolation
from gpupool.executors.listening import listen, listen_inside, recorded
from gpupool.executors.moves import FastMoves
from gpupool.executors.outputs import Writable
from gpupool.executors.remains import Remains, find_process
from gpupool.executors.task import Observed, PollResult, TaskSpec
from gpupool.runner import layout, wire
from gpupool.runner.network import leftover_egress
from gpupool.runner.warmnet import WARM_DIR, sweep_warm

NOTIFY_FIFO = ".notify"
MOVES_DIR = ".cgroup-moves"  # where the fast-moves hierarchy is mounted, in its holder
LAUNCH_DIR = ".gpupool"  # in the job's outputs: what its tasks start (launch plans)
CHECKPOINTS = "checkpoints"
CODE = "code"
MODEL = "model"
WORKSPACES = "workspaces"  # beside jobs_dir: one directory per user (the runner owns it to them)
WORKSPACE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # a gpupool user name

log = logging.getLogger(__name__)

# What a workload inherits from the server's environment when no base_env is given.
BASE_ENV_NAMES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR"}
)
RELEASE_WAIT_S = 1.0


def default_base_env() -> dict[str, str]:
    """The server's PATH, HOME, locale and similar: what a workload may reasonably inherit."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name in BASE_ENV_NAMES or name.startswith("LC_")
    }
    env.setdefault("PATH", os.defpath)
    return env


class LocalExecutor(Executor):
    """Launches each attempt's runner as a local process and watches it through its files.

    ``isolation``: the node's tenancy (sandbox, accounts, limits), as the server's settings
    make it; None runs attempts unsandboxed under the server's own account (the executor's
    own tests; the server always passes one). ``code_limits``: what a code snapshot may
    unpack to (the server's ``max_code_*``). ``listen_host``: the address a task that listens
    binds (None: the task's ``node_address``, as a pool's node agent has it).
    ``socket_listeners``: a task that listens with a network of its own is reached through
    its runner's socket; False (a pool's node, whose sockets the server cannot reach) keeps
    such a task on the node's network.
    """

    def __init__(
        self,
        jobs_dir: Path,
        base_env: dict[str, str] | None = None,
        python: str = sys.executable,
        fork_server: bool = True,
        isolation: Isolation | None = None,
        remains: Remains | None = None,
        code_limits: CodeLimits | None = None,
        model_limits: CodeLimits | None = None,
        listen_host: str | None = "127.0.0.1",
        socket_listeners: bool = True,
        environments: NodeEnvironments | None = None,
        image_cache: Path | None = None,
        dataset_cache: Path | None = None,
        node_name: str | None = None,
        dataset_cache_max_bytes: int = 0,
    ) -> None:
        self.jobs_dir = Path(jobs_dir)
        self.node_name = node_name  # the node it runs jobs on, when it answers for it
        # where this node keeps the dataset versions its jobs read (executors.datasets)
        self.dataset_cache = dataset_cache or self.jobs_dir.parent / "dataset-cache"
        self.dataset_cache_max_bytes = dataset_cache_max_bytes  # past it: LRU (runner.datasets)
        self.volumes_dir = self.jobs_dir.parent / "volumes"  # the teams' volumes on this node
        # where this node keeps the images' trees (the server's own, on its machine)
        self.image_cache = image_cache or self.jobs_dir.parent / "images" / "roots"
        self.environments = environments
        self.listen_host = listen_host
        self.socket_listeners = socket_listeners
        self.code_limits = code_limits or CodeLimits()
        self.model_limits = model_limits or CodeLimits()
        self._isolation = isolation
        self.remains = remains or Remains()
        self.base_env = dict(base_env) if base_env is not None else default_base_env()
        self.python = python
        self._fork_server = ForkServer(python, self._warm_network()) if fork_server else None
        self._changes: int | None = None  # read end of jobs_dir/.notify
        self._children: dict[str, subprocess.Popen[bytes]] = {}  # attempt dir -> runner
        self._unreaped: list[subprocess.Popen[bytes]] = []
        self._adopted: dict[str, psutil.Process] = {}  # runners found again by pid
        self._records: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        self._moves: FastMoves | None = None
        if isolation is not None:  # a node's executor: the cgroups its killed runners left
            self.remains.sweep(self.jobs_dir)
            self._stop_leftover_egress()
            self._hold_fast_moves(isolation)

    def _hold_fast_moves(self, isolation: Isolation) -> None:
        """Moves into cgroups without the kernel's wait, while this executor runs (root,
        cgroups in use, the setting on: ``executors.moves``)."""
        if not isolation.settings.cgroup_fast_moves or os.geteuid() != 0:
            return
        self._moves, why = FastMoves.hold(self.jobs_dir / MOVES_DIR)
        if why is not None:
            log.info("moving jobs into their cgroups waits for the kernel: %s", why)

    def _warm_network(self) -> list[str]:
        """The fork server's options for keeping network namespaces warm (root only, with
        pasta and network isolation on): a job with a network of its own then starts
        without waiting for pasta to configure one."""
        isolation = self._isolation
        if isolation is None or isolation.pasta is None or os.geteuid() != 0:
            return []
        count = isolation.settings.warm_networks
        if not isolation.network_on or count == 0:
            return []
        return ["--warm-network", str(self.jobs_dir / WARM_DIR), isolation.pasta, str(count)]

    def _stop_leftover_egress(self) -> None:
        """The pasta daemons of runners killed with -9 (nothing else would stop them)."""
        with contextlib.suppress(OSError):
            for pid in leftover_egress(str(self.jobs_dir)):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
                    log.info("stopped pasta %d, left by a runner that is gone", pid)
            sweep_warm(str(self.jobs_dir / WARM_DIR))

    # -- paths ----------------------------------------------------------------------------

    def job_dir(self, job_id: int) -> Path:
        return self.jobs_dir / str(job_id)

    def attempt_dir(self, job_id: int, attempt: int) -> Path:
        return self.job_dir(job_id) / "attempts" / str(attempt)

    def checkpoint_dir(self, job_id: int) -> Path:
        return self.job_dir(job_id) / CHECKPOINTS

    def log_path(self, handle: Handle) -> Path:
        return Path(handle.state["attempt_dir"]) / layout.LOG_FILE

    def endpoint(self, handle: Handle) -> Endpoint | None:
        """Where the attempt listens: what ``start`` chose (``executors.listening``)."""
        return listening(handle.state)

    def isolation(self) -> IsolationStatus | None:
        return self._isolation.status() if self._isolation is not None else None

    def held(self) -> dict[str, int]:
        """What this node's caches hold (``executors.holdings``: key -> bytes)."""
        envs = self.environments.settings.envs_dir if self.environments is not None else None
        return holdings.scan(envs, self.dataset_cache, self.image_cache)

    def holdings(self) -> dict[str, dict[str, int]]:
        return {self.node_name: self.held()} if self.node_name else {}

    def pack_outputs(
        self, job_id: int, node: str | None, path: str, limits: CodeLimits, into: Writable
    ) -> None:
        """The job's outputs (its launch plans left out: they are the platform's)."""
        outputs.pack(self.job_dir(job_id) / "outputs", path, limits, into, frozenset({LAUNCH_DIR}))

    def checkpoint_at(self, handle: Handle) -> float | None:
        """The newest mtime of the entries at the top of the checkpoint directory.

        One level only, so that a look costs one directory read however big the checkpoints
        are; a checkpoint written as a directory of shards shows in that directory's mtime.
        """
        newest = None
        try:
            with os.scandir(self.checkpoint_dir(handle.job_id)) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        mtime = entry.stat(follow_symlinks=False).st_mtime
                        newest = mtime if newest is None else max(newest, mtime)
        except OSError:
            return None
        return newest

    # -- start ----------------------------------------------------------------------------

    def start(self, task: TaskSpec) -> Handle:
        self._reap_released()
        _validate(task)
        attempt_dir = self.attempt_dir(task.job_id, task.attempt)
        # the checkpoint and output directories are the job's, so every attempt of a job (a
        # requeue after preemption) finds what the earlier ones left
        checkpoint_dir = str(self.checkpoint_dir(task.job_id))
        output_dir = str(self.job_dir(task.job_id) / "outputs")
        command = list(task.command) if task.launch is None else self._launcher(task)
        workspace = str(self.workspace_dir(task.user)) if task.workspace else None
        env = {**self.base_env, **task.env}
        image = self._image(task)
        if image is not None:  # docker's way: its Env under the job's, its Entrypoint first
            env = {**image.config.env_map(), **task.env}
            if task.launch is not None:  # a gang's task: its one process, as the plan says
                command = self._launched_in_image(task, env)
            command = image.config.command(command)
            if task.gpu_uuids:
                found = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
                env["LD_LIBRARY_PATH"] = ":".join([*found, images.DRIVER_DIR])
        if task.listen and not self.socket_listeners:
            task = replace(task, network="host")  # the server reaches no socket of this node
        isolated = self._isolation is not None and self._isolation.isolates_network(task)
        host = self.listen_host or task.node_address
        listening = {}
        if task.listen:
            listening = listen_inside(attempt_dir, env) if isolated else listen(task, host, env)
        tenancy: dict[str, Any] = {}
        if self._isolation is not None:
            tenancy = self._isolation.runner_spec(task, [output_dir, checkpoint_dir])
            if "sandbox" in tenancy and "PATH" not in task.env and image is None:
                env["PATH"] = self._isolation.job_path(env.get("PATH", ""))
        datasets = self._show_datasets(task, env, tenancy) if task.datasets else []
        if task.volumes:
            self._show_volumes(task, env, tenancy)
        try:
            for directory in (attempt_dir, checkpoint_dir, output_dir):
                Path(directory).mkdir(parents=True, exist_ok=True)
            if "account" in tenancy and "sandbox" not in tenancy:
                self._let_account_through(task.job_id)
        except OSError as e:
            raise _io_error(e, f"cannot create the directories of {attempt_dir}: {e}") from e
        spec = wire.spec_json(
            job_id=task.job_id,
            attempt=task.attempt,
            command=command,
            env=env,
            workdir=task.workdir,
            gpu_uuids=list(task.gpu_uuids),
            log_limit_bytes=task.log_limit_bytes,
            stop_grace_seconds=task.stop_grace_seconds,
            checkpoint_dir=checkpoint_dir,
            output_dir=output_dir,
            notify_fifo=str(self.jobs_dir / NOTIFY_FIFO),
            workspace=workspace,
            code_dir=str(self._unpack_code(task)) if task.code is not None else None,
            model_dir=str(self._unpack_model(task)) if task.model is not None else None,
            environment=self._environment(task),
            image=self._image_json(task, image, tenancy),
            tenancy=tenancy,
        )
        if datasets:
            spec["datasets"] = datasets
        _write_spec_once(attempt_dir, spec)
        account = tenancy.get("account")
        owner = str(account["uid"]) if isolated and account else ("" if isolated else None)
        pid = self._spawn(attempt_dir, owner)
        state = {
            "attempt_dir": str(attempt_dir),
            "runner_pid": pid,
            "runner_create_time": _create_time(pid),
            **listening,
        }
        return Handle(job_id=task.job_id, attempt=task.attempt, state=state)

    def _image(self, task: TaskSpec) -> images.Unpacked | None:
        """The task's image's tree on this node (unpacked on its first job here)."""
        if task.image is None:
            return None
        digest = str(task.image.get("digest"))
        if self._isolation is None or not self._isolation.enabled:
            message = "a job runs in an image only in a sandbox, and this node has none"
            raise LaunchError(message, user_message=message, reason="image_needs_sandbox")
        try:
            layout_dir = Path(str(task.image.get("layout") or ""))
            return images.unpack_once(layout_dir, digest, self.image_cache)
        except images.ImageError as e:
            message = f"the job's image {digest} cannot be used: {e.message}"
            raise LaunchError(message, user_message=message, reason="image_unusable") from e
        except OSError as e:
            raise _io_error(e, f"cannot unpack the image {digest}: {e}") from e

    def _launched_in_image(self, task: TaskSpec, env: dict[str, str]) -> list[str]:
        """A gang's task in an image runs its plan's one process without the rank launcher
        (``images.launched_in_image``); an MPI job's tasks need gpupool's own rsh agent,
        which runs on the host's Python: refused, as a plan of several processes is."""
        try:
            if task.launcher == "mpi":
                raise images.ImageError(
                    "an MPI job cannot run in an image yet (its remote "
                    "daemons start through gpupool's own agent)"
                )
            return images.launched_in_image(task.launch or {}, env)
        except images.ImageError as e:
            message = f"the job cannot run in its image: {e.message}"
            raise LaunchError(message, user_message=message, reason="image_unusable") from e

    def _image_json(
        self, task: TaskSpec, image: images.Unpacked | None, tenancy: dict[str, Any]
    ) -> dict[str, Any] | None:
        """spec.json's ``image``: its tree, its WorkingDir, the driver's libraries for a job
        given GPUs, the host's setpriv for one run under its own account."""
        if image is None or self._isolation is None:
            return None
        libraries = self._isolation.driver_libraries() if task.gpu_uuids else []
        setpriv = self._isolation.setpriv_files() if "account" in tenancy else []
        return wire.image_json(
            root=str(image.root), workdir=image.config.workdir, libraries=libraries, setpriv=setpriv
        )

    def _environment(self, task: TaskSpec) -> dict[str, Any] | None:
        """spec.json's ``environment`` for a task that runs in one; its runner builds it
        on this node first when it is not here yet (``runner.envbuild``)."""
        if task.environment is None:
            return None
        if task.environment.get("error"):
            message = str(task.environment["error"])
            raise LaunchError(message, user_message=message, reason="environment_missing")
        if self.environments is None:
            message = "this node does not run jobs with Python environments"
            raise LaunchError(message, user_message=message, reason="environment_unsupported")
        try:
            return self.environments.runner_spec(task.environment)
        except ValueError as e:
            raise LaunchError(str(e), user_message=str(e), reason="environment_unusable") from e

    def workspace_dir(self, user: str) -> Path:
        """A user's workspace on this node (its notebooks' files), kept across jobs."""
        if not WORKSPACE_NAME.fullmatch(user):
            raise LaunchError(
                f"no workspace for the user name {user!r}",
                user_message="this user's name cannot name a workspace directory",
                reason="invalid_task",
            )
        return self.jobs_dir.parent / WORKSPACES / user

    def _show_datasets(
        self, task: TaskSpec, env: dict[str, str], tenancy: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Where each dataset version the job reads is kept in this node's cache (its runner
        materialises it there first, if need be: ``runner.datasets``), shown read-only at
        its mount path by the sandbox; unsandboxed, the job is given the cache's own path.
        GPUPOOL_DATASET_<NAME> says where it is. spec.json's ``datasets``."""
        sandbox = tenancy.get("sandbox")
        mounts, found = [], []
        for use in task.datasets:
            path = str(self.dataset_cache / str(use["manifest"]))
            env[env_name(use["name"])] = use["mount"] if sandbox is not None else path
            mounts.append([path, use["mount"]])
            found.append({**use, "path": path, "cache_max_bytes": self.dataset_cache_max_bytes})
        if sandbox is not None:
            sandbox["mounts"] = mounts
        return found

    def _show_volumes(self, task: TaskSpec, env: dict[str, str], tenancy: dict[str, Any]) -> None:
        """Each volume the job mounts: its directory in the volumes' store the server
        names (a path every node of a pool shares; else this node's), made at its first use,
        writable by every job account of the node (only a sandbox that mounts it shows it,
        below a directory only the server may enter), shown read-write at its mount path.
        GPUPOOL_VOLUME_<NAME> says where it is."""
        sandbox = tenancy.get("sandbox")
        mounts = sandbox.setdefault("mounts", []) if sandbox is not None else []
        for use in task.volumes:
            store = Path(use["store"]) if use.get("store") else self.volumes_dir
            path = store / str(int(use["id"]))
            try:
                store.mkdir(parents=True, exist_ok=True, mode=0o700)
                if not path.is_dir():
                    path.mkdir(mode=0o777)
                    os.chmod(path, 0o777)
            except OSError as e:
                raise _io_error(e, f"cannot make the volume {use['name']} at {path}: {e}") from e
            env[volume_env_name(use["name"])] = use["mount"] if sandbox is not None else str(path)
            mounts.append([str(path), use["mount"], "rw"])

    def _unpack_code(self, task: TaskSpec) -> Path:
        """The job's code snapshot, unpacked under its directory (once: see ``unpack_once``),
        where the runner gives it to the job's account and shows it in the sandbox."""
        code_dir = self.job_dir(task.job_id) / CODE
        archive = Path(task.code_archive or "")
        try:
            archives.unpack_once(archive, code_dir, self.code_limits)
        except FileNotFoundError as e:
            message = f"the job's code snapshot {task.code} is missing from the server's storage"
            raise LaunchError(f"{message}: {e}", user_message=message, reason="code_missing") from e
        except OSError as e:
            raise _io_error(e, f"cannot unpack {archive} into {code_dir}: {e}") from e
        except GpupoolError as e:
            message = f"the job's code snapshot {task.code} could not be unpacked: {e.message}"
            raise LaunchError(message, user_message=message, reason="code_unpack_failed") from e
        return code_dir

    def _unpack_model(self, task: TaskSpec) -> Path:
        """The job's model version's files, unpacked once under its directory, where the
        runner shows them read-only in the sandbox (GPUPOOL_MODEL_DIR)."""
        model_dir = self.job_dir(task.job_id) / MODEL
        try:
            archives.unpack_once(Path(task.model_archive or ""), model_dir, self.model_limits)
        except FileNotFoundError as e:
            message = f"the model files {task.model} are missing from the server's storage"
            log_message = f"{message}: {e}"
            raise LaunchError(log_message, user_message=message, reason="model_missing") from e
        except OSError as e:
            raise _io_error(e, f"cannot unpack {task.model_archive} into {model_dir}: {e}") from e
        except GpupoolError as e:
            message = f"the model files {task.model} could not be unpacked: {e.message}"
            raise LaunchError(message, user_message=message, reason="model_unpack_failed") from e
        return model_dir

    def _launcher(self, task: TaskSpec) -> list[str]:
        """The command of a task that starts what its launch plan says: the plan is written
        into the job's outputs (the sandbox shows them), read there by gpupool.runner.ranks."""
        plan = self.job_dir(task.job_id) / "outputs" / LAUNCH_DIR / f"attempt-{task.attempt}.json"
        try:
            plan.parent.mkdir(parents=True, exist_ok=True)
            layout.atomic_write_json(plan, task.launch)
            # read by the job's own account; it holds gpupool's variables, not the job's env
            plan.parent.chmod(0o755)
            plan.chmod(0o644)
        except OSError as e:
            raise _io_error(e, f"cannot write the launch plan {plan}: {e}") from e
        return [self.python, "-m", "gpupool.runner.ranks", str(plan)]

    def _let_account_through(self, job_id: int) -> None:
        """Unsandboxed jobs under their own accounts reach their directories through the
        data directory's path: let every account pass (not list) the directories on it."""
        for directory in (self.jobs_dir.parent, self.jobs_dir, self.job_dir(job_id)):
            directory.chmod(directory.stat().st_mode | 0o111)

    def _spawn(self, attempt_dir: Path, network_owner: str | None = None) -> int:
        """Launch the runner: forked by the fork server when it answers, else a new process.
        ``network_owner``: its workload gets a network namespace of its own (a warm one, if
        the fork server has one, or one the last job of this Unix account, a uid, gave
        back; "" when it runs under none)."""
        if self._fork_server is not None:
            try:
                return self._fork_server.spawn(attempt_dir, network_owner)
            except OSError as e:
                log.warning("runner fork server failed (%s); starting runners directly", e)
                self._fork_server = None
        runner = self._popen(attempt_dir)
        self._children[str(attempt_dir)] = runner
        return runner.pid

    def change_fd(self) -> int | None:
        """The FIFO that runners write a byte into whenever they rewrite state.json."""
        if self._changes is None:
            fifo = self.jobs_dir / NOTIFY_FIFO
            self.jobs_dir.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkfifo(fifo, 0o600)
            # Read-write, so that the FIFO never reports end-of-file when no runner has it open.
            self._changes = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        return self._changes

    def clear_changes(self) -> None:
        if self._changes is None:
            return
        with contextlib.suppress(BlockingIOError):
            while os.read(self._changes, 4096):
                pass

    def close(self) -> None:
        """Stop the fork server; runners it launched keep running."""
        if self._fork_server is not None:
            self._fork_server.close()
        if self._moves is not None:
            self._moves.close()
            self._moves = None
        if self._changes is not None:
            os.close(self._changes)
            self._changes = None

    def _popen(self, attempt_dir: Path) -> subprocess.Popen[bytes]:
        argv = [self.python, "-m", "gpupool.runner", str(attempt_dir)]
        try:
            with open(attempt_dir / layout.RUNNER_LOG_FILE, "ab") as runner_log:
                return subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=runner_log,
                    stderr=subprocess.STDOUT,
                    cwd=attempt_dir,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as e:
            # Nothing ran: let a later start() of the same attempt try again.
            (attempt_dir / layout.SPEC_FILE).unlink(missing_ok=True)
            raise LaunchError(
                f"cannot start the runner {argv}: {e}",
                user_message="the node could not start the job's runner",
                reason="spawn_failed",
            ) from e

    # -- poll -----------------------------------------------------------------------------

    def poll(self, handle: Handle) -> PollResult:
        if self._unreaped:
            self._reap_released()
        attempt_dir = handle.state["attempt_dir"]
        record = self._record(attempt_dir)
        if record is not None and "exit_code" in record:
            return _exited(record)
        if self._runner_alive(handle):
            if record is not None and record.get("started_at") is not None:
                notes = tuple(record.get("notes") or ())
                return PollResult(Observed.RUNNING, started_at=record["started_at"], notes=notes)
            return _starting(attempt_dir)
        # The runner may have written its exit record just before it ended: look again.
        record = self._record(attempt_dir)
        if record is not None and "exit_code" in record:
            return _exited(record)
        return self._runner_gone(handle, record)

    def _runner_gone(self, handle: Handle, record: dict[str, Any] | None) -> PollResult:
        """Lost only once nothing of the workload remains: until then its processes are
        killed, and the attempt keeps its GPUs (a GPU is never handed out while in use)."""
        started_at = record.get("started_at") if record else None
        left = self.remains.kill(record)
        if left:
            message = (
                f"the runner is gone; {len(left)} process(es) of the job remain and are being "
                "killed; its GPUs stay reserved until they are gone"
            )
            return PollResult(Observed.ORPHANED, started_at=started_at, message=message)
        self.remains.clean(record)
        return PollResult(Observed.LOST, started_at=started_at, message=self._lost(handle))

    def _record(self, attempt_dir: str) -> dict[str, Any] | None:
        """state.json, re-read only when its inode, mtime or size changed."""
        path = os.path.join(attempt_dir, layout.STATE_FILE)
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._records.get(attempt_dir)
        if cached is not None and cached[0] == key:
            return cached[1]
        record = layout.read_json(path)
        if record is None:  # not expected (writes are atomic); keep what we knew
            return cached[1] if cached else None
        self._records[attempt_dir] = (key, record)
        return record

    def _runner_alive(self, handle: Handle) -> bool:
        child = self._children.get(handle.state["attempt_dir"])
        if child is not None:
            return child.poll() is None  # also reaps it
        return self._adopted_alive(handle)

    def _adopted_alive(self, handle: Handle) -> bool:
        """A runner this instance did not start: same pid and create time, and not a zombie."""
        attempt_dir = handle.state["attempt_dir"]
        try:
            proc = self._adopted.get(attempt_dir)
            if proc is None:
                proc = find_process(handle.state["runner_pid"], handle.state["runner_create_time"])
                if proc is None:
                    return False
                self._adopted[attempt_dir] = proc
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _lost(self, handle: Handle) -> str:
        child = self._children.get(handle.state["attempt_dir"])
        if child is None:
            return f"runner {handle.state['runner_pid']} is gone and left no exit record"
        if child.returncode == layout.EXIT_REFUSED:
            return "the runner refused to start: this attempt was already started"
        return f"runner ended with code {child.returncode} and left no exit record"

    # -- recover --------------------------------------------------------------------------

    def recover(self, job_id: int, attempt: int, node: str | None = None) -> Handle | None:
        """Find an attempt launched just before a crash, by its directory and ``started`` file."""
        attempt_dir = self.attempt_dir(job_id, attempt)
        started = attempt_dir / layout.STARTED_FILE
        if not started.exists():
            if attempt_dir.is_dir():  # a runner spawned this late must never run the workload
                layout.atomic_write_json(attempt_dir / layout.STOP_FILE, {"grace_seconds": 0})
            if not started.exists():
                return None
        pid = _int(started.read_text().strip())
        proc = find_process(pid, None)
        state = {
            "attempt_dir": str(attempt_dir),
            "runner_pid": pid,
            "runner_create_time": proc.create_time() if proc else 0.0,
            **recorded(attempt_dir),
        }
        return Handle(job_id=job_id, attempt=attempt, state=state)

    # -- stop -----------------------------------------------------------------------------

    def stop(self, handle: Handle, grace_seconds: float) -> None:
        attempt_dir = Path(handle.state["attempt_dir"])
        record = self._record(str(attempt_dir))
        if record is not None and "exit_code" in record:
            return
        try:
            # Read by the runner when it gets SIGTERM, and before it launches the workload.
            stop_request = {"grace_seconds": grace_seconds}
            layout.atomic_write_json(attempt_dir / layout.STOP_FILE, stop_request)
        except OSError as e:
            log.warning("cannot write the stop request of %s: %s", attempt_dir, e)
        if not self._runner_alive(handle):
            self.remains.kill(self._record(str(attempt_dir)))
        elif (attempt_dir / layout.STARTED_FILE).exists():
            # Without `started` the runner has not installed its handlers yet; it will see
            # stop.json before it launches anything, so no signal is needed (or safe).
            with contextlib.suppress(ProcessLookupError):
                os.kill(handle.state["runner_pid"], signal.SIGTERM)

    # -- release --------------------------------------------------------------------------

    def release(self, handle: Handle) -> None:
        attempt_dir = handle.state["attempt_dir"]
        record = self._record(attempt_dir)
        self._records.pop(attempt_dir, None)
        self._adopted.pop(attempt_dir, None)
        child = self._children.pop(attempt_dir, None)
        if child is not None and child.poll() is None:
            if record is not None and "exit_code" in record:
                # The runner exits right after writing its exit record: wait a moment.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=RELEASE_WAIT_S)
            if child.poll() is None:  # a later start(), poll() or release() reaps it
                self._unreaped.append(child)
        self._reap_released()

    def _reap_released(self) -> None:
        self._unreaped = [child for child in self._unreaped if child.poll() is None]


def _validate(task: TaskSpec) -> None:
    problems = []
    if not task.command or not all(isinstance(arg, str) for arg in task.command):
        problems.append("the command must be a non-empty list of strings")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in task.env.items()):
        problems.append("environment names and values must be strings")
    if task.log_limit_bytes < 0:
        problems.append("log_limit_bytes must not be negative")
    if task.stop_grace_seconds < 0:
        problems.append("stop_grace_seconds must not be negative")
    if problems:
        text = "; ".join(problems)
        raise LaunchError(f"invalid task: {text}", user_message=text, reason="invalid_task")


def _starting(attempt_dir: str) -> PollResult:
    """A runner not done setting up; what it is doing when it says (``progress``: building
    the job's environment)."""
    progress = layout.read_json(os.path.join(attempt_dir, layout.PROGRESS_FILE))
    if progress is None:
        return PollResult(Observed.STARTING)
    return PollResult(
        Observed.STARTING, reason=progress.get("reason"), message=progress.get("message")
    )


def _write_spec_once(attempt_dir: Path, spec: dict[str, Any]) -> None:
    """Publish spec.json atomically and exclusively: an attempt is launched at most once.
    Not synced to disk: the attempt is recorded in the database before it is launched, and
    after a crash of the machine its runner is gone whether the file survived or not (the
    attempt is then lost, and a new one made); the syncs cost milliseconds every launch."""
    if (attempt_dir / layout.STARTED_FILE).exists():
        raise _already_started(attempt_dir)
    tmp = attempt_dir / f".{layout.SPEC_FILE}.{os.getpid()}.tmp"
    try:
        layout.atomic_write_json(tmp, spec, durable=False)
        os.link(tmp, attempt_dir / layout.SPEC_FILE)  # fails if a spec is already there
    except FileExistsError as e:
        raise _already_started(attempt_dir) from e
    except OSError as e:
        raise _io_error(e, f"cannot write the spec of {attempt_dir}: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)


def _io_error(error: OSError, log_message: str) -> LaunchError:
    """A launch that failed on the node's disk; a full disk sends the job back to the queue."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        message = "the node's disk was full when the job was to start; it waits to start again"
        return LaunchError(log_message, user_message=message, reason="storage_full")
    message = "the node could not prepare the job's files"
    return LaunchError(log_message, user_message=message, reason="io_error")


def _already_started(attempt_dir: Path) -> LaunchError:
    return LaunchError(
        f"attempt {attempt_dir} was already launched; refusing to launch it twice",
        user_message="this attempt was already started",
        reason="already_started",
    )


def _exited(record: dict[str, Any]) -> PollResult:
    message = record.get("message")
    if message is None and record.get("signal"):
        message = f"killed by signal {record['signal']}"
    exceeded = record.get("exceeded")
    return PollResult(
        Observed.EXITED,
        exit_code=record["exit_code"],
        started_at=record.get("started_at"),
        ended_at=record.get("ended_at"),
        message=message,
        reason=exceeded.get("reason") if isinstance(exceeded, dict) else None,
        notes=tuple(record.get("notes") or ()),
    )


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return layout.process_create_time(pid)


class ForkServer:
    """The executor's side of ``gpupool.runner.forkserver``: started on first use, restarted
    once if it went away. Requests are serialised; each answer is the new runner's pid."""

    def __init__(self, python: str, options: list[str] | None = None) -> None:
        self.python = python
        self.options = options or []  # e.g. --warm-network DIR PASTA
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def spawn(self, attempt_dir: Path, network_owner: str | None = None) -> int:
        """The runner's pid. ``network_owner``: see ``LocalExecutor._spawn``."""
        request = f"{attempt_dir}\n"
        if network_owner is not None:
            request = f"{attempt_dir}\tnet\t{network_owner}\n"
        with self._lock:
            for _ in range(2):
                answer = self._ask(request.encode())
                if answer is not None:
                    return answer
                self._discard()
        raise OSError("the runner fork server does not answer")

    def close(self) -> None:
        with self._lock:
            self._discard()

    def _ask(self, request: bytes) -> int | None:
        process = self._ensure()
        try:
            process.stdin.write(request)
            process.stdin.flush()
            line = process.stdout.readline().strip()
        except OSError:
            return None
        return int(line) if line.isdigit() else None

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [self.python, "-m", "gpupool.runner", "--fork-server", *self.options],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        return self._process

    def _discard(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None
