"""Tenancy on a node: what each attempt's runner is told to do so that a job stays its own.

From the server's settings and this node's inventory, ``Isolation.runner_spec`` gives the
parts of spec.json that the runner turns into a sandbox (``gpupool.runner.sandbox``), an
account, cgroup limits and a GPU memory watch. ``Isolation.status`` says whether jobs can
run here at all: with isolation on, a node that cannot make sandboxes runs no job (never a
silently weaker one), and says what to install.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

import gpupool
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.isolation import IsolationMode, IsolationStatus
from gpupool.domain.units import parse_bytes
from gpupool.executors import images
from gpupool.executors.accounts import AccountError, Accounts
from gpupool.executors.base import LaunchError
from gpupool.executors.fence import fence_spec
from gpupool.executors.listening import ISOLATED_PORT
from gpupool.executors.task import TaskSpec
from gpupool.runner import wire
from gpupool.runner.paths import conflict, within
from gpupool.settings import Settings

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0
RECHECK_SECONDS = 10.0  # how often an unavailable sandbox is tried again
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
MIG_MINORS = Path("/proc/driver/nvidia-caps/mig-minors")
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora/RHEL: dnf install "
    "bubblewrap), or set GPUPOOL_ISOLATION=off to run jobs unsandboxed"
)


def split_paths(text: str) -> list[str]:
    """A comma-separated setting as absolute paths (relative or empty entries are dropped)."""
    return [p.strip() for p in text.split(",") if p.strip().startswith("/")]


@dataclass
class DeviceMap:
    """GPU UUID -> the device nodes a job given that GPU (or MIG device) needs, from this
    node's inventory: ``/dev/nvidiaN`` by minor number, a MIG device's capability nodes, and
    the NVIDIA control devices present in ``device_dir``."""

    device_dir: Path
    mig_minors: Path = MIG_MINORS
    _nodes: dict[str, list[str]] = field(default_factory=dict)
    inventory: NodeInventory | None = None

    def update(self, inventory: NodeInventory | None) -> None:
        nodes: dict[str, list[str]] = {}
        caps = self._mig_caps()
        for gpu in inventory.gpus if inventory else []:
            minor = gpu.minor_number if gpu.minor_number is not None else gpu.index
            nodes[gpu.uuid] = [f"nvidia{minor}"]
            for mig in gpu.mig_devices:
                gi, ci = mig.gpu_instance_id, mig.compute_instance_id
                extra = [
                    caps.get(f"gpu{minor}/gi{gi}/access"),
                    caps.get(f"gpu{minor}/gi{gi}/ci{ci}/access"),
                ]
                nodes[mig.uuid] = [
                    f"nvidia{minor}",
                    *(f"nvidia-caps/nvidia-cap{n}" for n in extra if n),
                ]
        self._nodes = nodes
        self.inventory = inventory  # the node's memory and GPUs give a job's default memory

    def devices(self, uuids: list[str]) -> list[list[str]]:
        """``[host path, path inside]`` pairs for a job given ``uuids`` (none for no GPU)."""
        if not uuids:
            return []
        names: list[str] = []
        for uuid in uuids:
            names += [n for n in self._nodes.get(uuid, []) if n not in names]
        names += [n for n in CONTROL_DEVICES if (self.device_dir / n).exists()]
        return [
            [str(self.device_dir / n), f"/dev/{n}"] for n in names if (self.device_dir / n).exists()
        ]

    def _mig_caps(self) -> dict[str, int]:
        try:
            lines = self.mig_minors.read_text().splitlines()
        except OSError:
            return {}
        found = {}
        for line in lines:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                found[parts[0]] = int(parts[1])
        return found


class Isolation:
    """The tenancy settings of a node, turned into each runner's spec; probes bubblewrap.

    ``api``: (port, Unix socket) of the server on this node: a job with a network of its own
    finds the platform's API on its own loopback at that port (its runner's bridge relays it
    to the socket); None on a pool's node, whose jobs reach the server by its address."""

    def __init__(
        self,
        settings: Settings,
        accounts: Accounts | None = None,
        api: tuple[int, str] | None = None,
    ) -> None:
        self.settings = settings
        self.enabled = settings.isolated
        self.root = os.geteuid() == 0
        self.accounts = accounts or (
            Accounts(settings.job_account, settings.create_unix_users) if self.root else None
        )
        self.devices = DeviceMap(settings.device_dir)
        self.bwrap = _which(settings.bwrap_path)
        self.setpriv = _which("setpriv")
        self.network_on = settings.network_isolation == "on"
        # None: jobs get no egress (they are told); the link's own name, not its target's:
        # Debian's pasta is a link to passt, which runs as pasta only when called so
        self.pasta = _which(settings.pasta_path, resolve=False)
        self.nft = _which("nft")  # None: a gang's tasks on the node's network are unfenced
        # (port, server's Unix socket): the platform's API on each job's own loopback
        self.api = api
        self.protected = protected_paths(settings)
        # what every sandbox shows: fixed by the settings, so worked out once, not per start
        self.readonly = self.readonly_paths()
        self.readwrite = split_paths(settings.sandbox_readwrite_paths)
        # a job in a container image sees the image's system, not the host's: of the host,
        # only what an admin shares (and the driver's libraries, when given GPUs)
        self.image_readonly = split_paths(settings.sandbox_readonly_paths)
        self._driver_libraries: list[tuple[str, str]] | None = None
        self._setpriv_files: list[str] | None = None
        self._bwrap_sizes: bool | None = None
        self._shown = [os.path.realpath(p) for p in [*self.readonly, *self.readwrite]]
        self._status: IsolationStatus | None = None
        self._checked_at = 0.0
        self._lock = threading.Lock()

    # -- status ---------------------------------------------------------------------------

    def status(self) -> IsolationStatus:
        """Whether and how jobs run here; an unavailable sandbox is tried again now and then
        (bubblewrap installed while the server runs is found without a restart)."""
        with self._lock:
            stale = time.monotonic() - self._checked_at > RECHECK_SECONDS
            if self._status is None or (not self._status.runs_jobs and stale):
                self._status = self._check()
                self._checked_at = time.monotonic()
            return self._status

    def _check(self) -> IsolationStatus:
        identity = self.identity()
        if not self.enabled:
            return IsolationStatus(
                mode=IsolationMode.OFF,
                runs_jobs=True,
                identity=identity,
                message=(
                    "isolation is OFF (GPUPOOL_ISOLATION=off): jobs run unsandboxed and can "
                    "read what " + identity + " can, the server's data included"
                ),
            )
        problem = self._sandbox_problem()
        if problem is not None:
            return IsolationStatus(
                mode=IsolationMode.UNAVAILABLE, runs_jobs=False, identity=identity, message=problem
            )
        return IsolationStatus(
            mode=IsolationMode.SANDBOX,
            runs_jobs=True,
            identity=identity,
            message=f"every job runs in a bubblewrap sandbox, as {identity}",
        )

    def identity(self) -> str:
        if self.accounts is None:
            return f"the server's account ({_account_name()}) in a user namespace"
        if self.accounts.create:
            return "its user's own Unix account (mapped, or created as gp-<user>)"
        return f"its user's mapped Unix account, else {self.accounts.default}"

    def _sandbox_problem(self) -> str | None:
        if self.bwrap is None:
            return f"jobs cannot be isolated: bubblewrap (bwrap) is not installed; {INSTALL_HINT}"
        if self.root and self.setpriv is None:
            return "jobs cannot run under their accounts: setpriv (util-linux) is not installed"
        return _probe(self.bwrap, self.root)

    # -- what a runner is told ----------------------------------------------------------------

    def runner_spec(self, task: TaskSpec, job_dirs: list[str]) -> dict[str, Any]:
        """The tenancy parts of an attempt's spec.json (``runner.wire.tenancy_json``);
        LaunchError if its account is unusable."""
        memory = {g.uuid: g.memory_bytes for g in task.gpu_grants if g.share < 1}
        sampler = self.settings.gpu_memory_sampler
        grace = self.settings.gpu_memory_grace_seconds
        return wire.tenancy_json(
            protected=self.protected,
            limits=self.limits(task),
            gpu_shares={g.uuid: g.share for g in task.gpu_grants},
            mps_pipe_dir=str(self.settings.mps_pipe_directory),
            gpu_sampler=sampler,
            account=self._account(task),
            gpu_memory=wire.gpu_memory_json(memory, sampler, grace) if memory else None,
            sandbox=self._sandbox(task, job_dirs) if self.enabled else None,
            # a gang's task over several nodes, on the node's network
            fence=fence_spec(task, self.settings, self.nft),
        )

    def limits(self, task: TaskSpec) -> dict[str, Any]:
        """Every attempt's cgroup limits: its CPUs, its --memory or the node's default, and
        its --pids or the node's task limit (so a fork bomb or a leak stays its own)."""
        memory = task.memory_bytes or self.default_memory()
        pids = min(task.pids or self.settings.job_pids_max, self.settings.job_pids_max)
        return wire.limits_json(task.cpus, memory, pids)

    def default_memory(self) -> int:
        """GPUPOOL_JOB_DEFAULT_MEMORY, else the node's memory divided by its GPUs (or by 1)."""
        if self.settings.job_default_memory:
            return parse_bytes(self.settings.job_default_memory)
        inventory = self.devices.inventory
        if inventory is None:
            return psutil.virtual_memory().total
        return inventory.memory_bytes // max(1, len(inventory.gpus))

    def isolates_network(self, task: TaskSpec) -> bool:
        """Whether the task gets a network namespace of its own: sandboxed, asked for (the
        default on one node), and not switched off by the admin."""
        return self.enabled and self.network_on and task.network == "isolated"

    def network(self, task: TaskSpec) -> dict[str, Any]:
        """spec.json's ``sandbox.network`` (``runner.wire.NetworkPolicy``)."""
        if not self.isolates_network(task):
            return wire.network_json(isolated=False)
        port = ISOLATED_PORT if task.listen else None
        return wire.network_json(isolated=True, egress=self.pasta, port=port, api=self.api)

    def job_path(self, path: str) -> str:
        """The PATH a sandboxed job gets when it sets none: the Python the sandbox shows first
        (so that ``python`` is one that runs there), then the entries of the server's PATH
        that the sandbox shows (a pyenv shim under a hidden home would only fail)."""
        python = [f"{p}/bin" for p in dict.fromkeys([sys.prefix, sys.base_prefix])]
        entries = python if self.settings.sandbox_show_python else []
        for entry in path.split(os.pathsep):
            real = os.path.realpath(entry) if entry.startswith("/") else ""
            if real and any(within(real, s) for s in self._shown):
                entries.append(entry)
        return os.pathsep.join(dict.fromkeys(entries)) or os.defpath

    def _account(self, task: TaskSpec) -> dict[str, Any] | None:
        if self.accounts is None:
            return None
        try:
            return self.accounts.for_job(task.user, task.unix_user).as_json()
        except AccountError as e:
            raise LaunchError(str(e), user_message=str(e), reason="account_unusable") from e

    def _sandbox(self, task: TaskSpec, job_dirs: list[str]) -> dict[str, Any]:
        return wire.sandbox_json(
            bwrap=self.bwrap,
            setpriv=self.setpriv,
            readonly=self.readonly if task.image is None else self.image_readonly,
            readwrite=self.readwrite,
            hidden=self.protected,
            devices=self.devices.devices(list(task.gpu_uuids)),
            network=self.network(task),
            shm_bytes=task.shm_bytes,
            bwrap_size=task.shm_bytes is None or self.bwrap_sizes_tmpfs(),
        )

    def bwrap_sizes_tmpfs(self) -> bool:
        """Whether this node's bwrap takes ``--size`` before ``--tmpfs`` (0.8 and later), for
        a job that sizes its /dev/shm. Found once, at the first such job."""
        if self._bwrap_sizes is None:
            self._bwrap_sizes = "--size" in _run([self.bwrap or "bwrap", "--help"])
        return self._bwrap_sizes

    def driver_libraries(self) -> list[tuple[str, str]]:
        """``(host path, path inside)`` of the NVIDIA driver's libraries this machine's
        dynamic linker knows (``ldconfig -p``), shown to a job in an image given GPUs in
        ``images.DRIVER_DIR``; none on a machine without the driver. Found once."""
        if self._driver_libraries is None:
            self._driver_libraries = images.driver_mounts(_run(["ldconfig", "-p"]))
        return self._driver_libraries

    def setpriv_files(self) -> list[str]:
        """setpriv, the dynamic loader it names and the libraries it loads (``ldd``): what a
        job in an image needs of the host to start under its own account. Found once."""
        if self._setpriv_files is None:
            found = images.program_files(self.setpriv, _run(["ldd", self.setpriv or ""]))
            self._setpriv_files = found
        return self._setpriv_files

    def readonly_paths(self) -> list[str]:
        paths = split_paths(self.settings.sandbox_system_paths)
        paths += split_paths(self.settings.sandbox_readonly_paths)
        if self.settings.sandbox_show_python:
            paths += [p for p in {sys.base_prefix, sys.prefix} if p.startswith("/")]
            # gpupool's own package (outside the prefix when installed editable): a job over
            # several nodes starts its ranks with gpupool.runner.ranks inside the sandbox
            paths.append(str(Path(gpupool.__file__).resolve().parents[1]))
        return list(dict.fromkeys(paths))


def workdir_conflict(workdir: str, protected: list[str], sandboxed: bool) -> str | None:
    """The protected path a working directory lies in (or above, where no sandbox hides
    them), as the runner checks it on the node; None when it may be used."""
    return conflict(os.path.realpath(workdir), protected, above_too=not sandboxed)


def protected_paths(settings: Settings) -> list[str]:
    """What a job never sees and no working directory may be in or above: the data
    directory and the server account's gpupool CLI configuration (its saved token)."""
    paths = [settings.data_dir, Path.home() / ".config" / "gpupool"]
    return list(dict.fromkeys(os.path.realpath(p) for p in paths))


def _run(argv: list[str]) -> str:
    """A program's output ('' when it cannot run or fails)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _probe(bwrap: str, root: bool) -> str | None:
    """Make a small sandbox as the runner will; None when it works, else why not."""
    argv = [bwrap, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--unshare-pid", "--unshare-ipc", "--die-with-parent"]
    if not root:
        argv += ["--unshare-user", "--disable-userns"]
    try:
        done = subprocess.run(
            [*argv, "--", "true"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"jobs cannot be isolated: bubblewrap did not run ({e}); {INSTALL_HINT}"
    if done.returncode == 0:
        return None
    said = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    hint = (
        ""
        if root
        else (
            " Unprivileged sandboxes need user namespaces: allow them (e.g. sysctl "
            "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04), or run the "
            "server as root."
        )
    )
    return f"jobs cannot be isolated: bubblewrap cannot make a sandbox here ({said[0]}).{hint}"


def _which(program: str, resolve: bool = True) -> str | None:
    found = shutil.which(program, path=os.environ.get("PATH", os.defpath) + ":/usr/sbin:/usr/bin")
    if not found:
        return None
    return os.path.realpath(found) if resolve else os.path.abspath(found)


def _account_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
