"""spec.json, the runner's one input: its versioned schema, its one writer and its one
parser (stdlib only).

The executor says what an attempt is with the ``*_json`` functions below (the server's side:
``executors/local.py`` for the attempt, ``executors/isolation.py`` and ``executors/fence.py``
for its sandbox, limits and fence) and writes the result once, atomically, into the attempt's
directory; the runner reads it back with ``load_spec`` into ``RunnerSpec`` and the policies
it holds (``SandboxPolicy``, ``NetworkPolicy``, ``FencePolicy``), each field checked, so that
a bad spec fails with a ``SpecError`` naming the field. Field names and ``SPEC_VERSION`` stay
as they are: a running attempt's spec, written by an earlier server, is read again when a
restarted server re-adopts it. A new field is optional (absent in older specs); a field that
changes meaning needs a new version, with a reader kept for the old one.

The schema, as JSON (every key the writer may give; ``null`` or absent: not set)::

    {"version": 1, "job_id": int, "attempt": int, "command": [str, ...], "env": {str: str},
     "workdir": str | null, "code_dir": str | null, "model_dir": str | null,
     "environment": EnvironmentSpec's object (a Python environment to build or use) | absent,
     "image": ImageSpec's object (a container image's tree as the sandbox's root) | absent,
     "workspace": str | null, "gpu_uuids": [str], "log_limit_bytes": int,
     "stop_grace_seconds": float, "checkpoint_dir": str, "output_dir": str,
     "notify_fifo": str | null,
     -- tenancy (all optional: a spec without them runs unsandboxed, as the runner's account)
     "account": {"uid", "gid", "groups", ...}, "protected": [path],
     "limits": {"cpus", "memory_bytes", "pids_max"}, "gpu_shares": {uuid: share},
     "gpu_memory": {"limits": {uuid: bytes}, "sampler": str, "grace_seconds": float},
     "mps_pipe_dir": str, "gpu_sampler": str | null,
     "sandbox": SandboxPolicy's object (its "network": NetworkPolicy's),
     "fence": FencePolicy's object}
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

from gpupool.runner.layout import SPEC_FILE, job_metrics_file

# No dataclasses, pathlib or typing here: importing them costs the runner's start time.

SPEC_VERSION = 1
FENCE_TABLE_PREFIX = "gpupool_fence"  # the node's fence table: this, then a digest
NETNS = re.compile(r"^/proc/\d+(/task/\d+)?/ns/net$")
TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class SpecError(Exception):
    """spec.json is missing or malformed."""


# -- the writer ------------------------------------------------------------------------------


def spec_json(
    *,
    job_id: int,
    attempt: int,
    command: list[str],
    env: dict[str, str],
    workdir: str | None,
    gpu_uuids: list[str],
    log_limit_bytes: int,
    stop_grace_seconds: float,
    checkpoint_dir: str,
    output_dir: str,
    notify_fifo: str | None = None,
    workspace: str | None = None,
    code_dir: str | None = None,
    model_dir: str | None = None,
    environment: dict[str, object] | None = None,
    image: dict[str, object] | None = None,
    tenancy: dict[str, object] | None = None,
) -> dict[str, object]:
    """The whole spec.json of one attempt; ``tenancy``: ``tenancy_json``'s parts, if any."""
    spec: dict[str, object] = {
        "version": SPEC_VERSION,
        "job_id": job_id,
        "attempt": attempt,
        "command": list(command),
        "env": dict(env),
        "workdir": workdir,
        "workspace": workspace,
        "gpu_uuids": list(gpu_uuids),
        "log_limit_bytes": log_limit_bytes,
        "stop_grace_seconds": stop_grace_seconds,
        "checkpoint_dir": checkpoint_dir,
        "output_dir": output_dir,
        "notify_fifo": notify_fifo,
    }
    if code_dir is not None:
        spec["code_dir"] = code_dir
    if model_dir is not None:
        spec["model_dir"] = model_dir
    if environment is not None:
        spec["environment"] = environment
    if image is not None:
        spec["image"] = image
    spec.update(tenancy or {})
    return spec


def tenancy_json(
    *,
    protected: list[str],
    limits: dict[str, object],
    gpu_shares: dict[str, float],
    mps_pipe_dir: str,
    gpu_sampler: str | None,
    account: dict[str, object] | None = None,
    gpu_memory: dict[str, object] | None = None,
    sandbox: dict[str, object] | None = None,
    fence: dict[str, object] | None = None,
) -> dict[str, object]:
    """The parts of spec.json that keep the attempt apart from others: its account, limits,
    GPU shares, sandbox (``sandbox_json``) and, for a gang's task on the node's network, the
    node's fence (``fence_json``)."""
    parts: dict[str, object] = {
        "protected": list(protected),
        "limits": limits,
        "gpu_shares": gpu_shares,
        "mps_pipe_dir": mps_pipe_dir,
        "gpu_sampler": gpu_sampler,  # the job's GPU metrics too
    }
    optional = {"account": account, "gpu_memory": gpu_memory, "sandbox": sandbox, "fence": fence}
    parts.update((key, value) for key, value in optional.items() if value is not None)
    return parts


def limits_json(
    cpus: float | None, memory_bytes: int | None, pids_max: int | None
) -> dict[str, object]:
    """spec.json's ``limits``: the attempt's cgroup limits (None: none of that kind)."""
    return {"cpus": cpus, "memory_bytes": memory_bytes, "pids_max": pids_max}


def gpu_memory_json(
    limits: dict[str, int], sampler: str, grace_seconds: float
) -> dict[str, object]:
    """spec.json's ``gpu_memory``: the GPU memory each fractional GPU's share may use."""
    return {"limits": limits, "sampler": sampler, "grace_seconds": grace_seconds}


def sandbox_json(
    *,
    bwrap: str | None,
    setpriv: str | None,
    readonly: list[str],
    readwrite: list[str],
    hidden: list[str],
    devices: list[list[str]],
    network: dict[str, object],
    shm_bytes: int | None = None,
    bwrap_size: bool = True,
) -> dict[str, object]:
    """spec.json's ``sandbox`` (``SandboxPolicy``); ``network``: ``network_json``'s.
    ``bwrap`` None (not installed): the runner refuses the spec, and says why.
    ``shm_bytes``: the size of the job's /dev/shm (None: tmpfs's default); ``bwrap_size``:
    whether the node's bwrap takes ``--size`` (else the size is noted as not enforced)."""
    sandbox: dict[str, object] = {
        "bwrap": bwrap,
        "setpriv": setpriv,
        "readonly": list(readonly),
        "readwrite": list(readwrite),
        "hidden": list(hidden),
        "devices": [list(pair) for pair in devices],
        "network": network,
    }
    if shm_bytes is not None:
        sandbox |= {"shm_bytes": shm_bytes, "bwrap_size": bwrap_size}
    return sandbox


def network_json(
    isolated: bool,
    egress: str | None = None,
    port: int | None = None,
    api: tuple[int, str] | None = None,
) -> dict[str, object]:
    """spec.json's ``sandbox.network`` (``NetworkPolicy``); ``api``: (port inside, the
    server's Unix socket)."""
    if not isolated:
        return {"mode": "host"}
    offered = {"port": api[0], "socket": api[1]} if api else None
    return {"mode": "isolated", "egress": egress, "port": port, "api": offered}


def fence_json(
    *,
    nft: str | None,
    fence_dir: str,
    table: str,
    platform_uids: list[int],
    platform_pids: list[int],
    open_ports: list[int],
    closed_ranges: list[tuple[int, int]],
    rendezvous: list[int],
    peers: list[str],
) -> dict[str, object]:
    """spec.json's ``fence`` (``FencePolicy``)."""
    return {
        "nft": nft,
        "dir": fence_dir,
        "table": table,
        "platform_uids": list(platform_uids),
        "platform_pids": list(platform_pids),
        "open_ports": list(open_ports),
        "closed_ranges": [list(pair) for pair in closed_ranges],
        "rendezvous": list(rendezvous),
        "peers": list(peers),
    }


# -- the parser ------------------------------------------------------------------------------


class RunnerSpec:
    """What the runner must run, as the executor wrote it into spec.json."""

    __slots__ = (
        "job_id",
        "attempt",
        "command",
        "env",
        "workdir",
        "code_dir",
        "model_dir",
        "environment",
        "datasets",
        "workspace",
        "gpu_uuids",
        "log_limit_bytes",
        "stop_grace_seconds",
        "checkpoint_dir",
        "output_dir",
        "notify_fifo",
        "image",
        "account",
        "sandbox",
        "protected",
        "cpus",
        "memory_bytes",
        "pids_max",
        "gpu_shares",
        "gpu_memory",
        "mps_pipe_dir",
        "gpu_sampler",
        "fence",
    )

    def __init__(self, raw: dict[str, object]) -> None:
        """Validate a decoded spec.json; raise SpecError naming the bad field."""
        if raw.get("version") != SPEC_VERSION:
            raise SpecError(f"unsupported spec version {raw.get('version')!r}")
        self.job_id: int = _int(raw, "job_id")
        self.attempt: int = _int(raw, "attempt")
        self.command: list[str] = _command(raw.get("command"))
        self.env: dict[str, str] = _env(raw.get("env"))
        self.workdir: str | None = _optional_str(raw, "workdir")
        # the job's code snapshot, unpacked by the executor: its working directory, and a
        # directory of its own like its outputs (given to its account, shown in its sandbox)
        self.code_dir: str | None = _optional_str(raw, "code_dir")
        if self.code_dir is not None and self.workdir is not None:
            raise SpecError("workdir and code_dir exclude each other")
        # a model version's files, unpacked by the executor: shown read-only (GPUPOOL_MODEL_DIR)
        self.model_dir: str | None = _optional_str(raw, "model_dir")
        # a Python environment: built on this node first if need be, then shown read-only
        # with its bin/ first on PATH (runner.envbuild)
        env = raw.get("environment")
        self.environment = None if env is None else EnvironmentSpec(env)
        # dataset versions: materialised in the node's cache first if need be
        # (runner.datasets), then shown read-only at their mounts (sandbox.mounts)
        self.datasets: list[DatasetSpec] = _datasets(raw.get("datasets"))
        # a container image's tree: the sandbox's read-only root (runner.sandbox)
        image = raw.get("image")
        self.image = None if image is None else ImageSpec(image)
        # its user's workspace on the node (JobSpec.workspace): given to its account like its
        # outputs, kept across jobs; its working directory unless it has a workdir or code
        self.workspace: str | None = _optional_str(raw, "workspace")
        self.gpu_uuids: list[str] = _str_list(raw, "gpu_uuids")
        self.log_limit_bytes: int = int(_non_negative(raw, "log_limit_bytes"))
        self.stop_grace_seconds: float = float(_non_negative(raw, "stop_grace_seconds"))
        self.checkpoint_dir: str = _str(raw, "checkpoint_dir")
        self.output_dir: str = _str(raw, "output_dir")
        self.notify_fifo: str | None = _optional_str(raw, "notify_fifo")
        # Tenancy (all optional: a spec without them runs unsandboxed, as the runner's account)
        self.account: dict[str, object] | None = _account(raw.get("account"))
        sandbox = raw.get("sandbox")
        self.sandbox = None if sandbox is None else SandboxPolicy(sandbox)
        self.protected: list[str] = _str_list(raw, "protected")
        limits = raw.get("limits") or {}
        self.cpus: float | None = _optional_positive(limits, "cpus")
        self.memory_bytes: int | None = _optional_int(_optional_positive(limits, "memory_bytes"))
        # tasks (processes and threads) it may hold at once; absent from older specs: no limit
        self.pids_max: int | None = _optional_int(_optional_positive(limits, "pids_max"))
        self.gpu_shares: dict[str, float] = _number_map(raw.get("gpu_shares"), "gpu_shares")
        self.gpu_memory: dict[str, object] | None = _gpu_memory(raw.get("gpu_memory"))
        self.mps_pipe_dir: str | None = _optional_str(raw, "mps_pipe_dir")
        # where the job's GPU samples come from (nvml, file:PATH); None: no samples
        self.gpu_sampler: str | None = _optional_str(raw, "gpu_sampler")
        # a task of a gang over several nodes (on the node's network): the node's fence
        fence = raw.get("fence")
        self.fence = None if fence is None else FencePolicy(fence)

    def workload_env(self) -> dict[str, str]:
        """The base env from the spec plus the variables gpupool owns (these always win)."""
        env = dict(self.env)
        visible = ",".join(self.gpu_uuids)
        env["CUDA_VISIBLE_DEVICES"] = visible
        env["NVIDIA_VISIBLE_DEVICES"] = visible
        env["GPUPOOL_JOB_ID"] = str(self.job_id)
        env["GPUPOOL_ATTEMPT"] = str(self.attempt)
        env["GPUPOOL_CHECKPOINT_DIR"] = self.checkpoint_dir
        env["GPUPOOL_OUTPUT_DIR"] = self.output_dir
        if self.workspace:
            env["GPUPOOL_WORKSPACE"] = self.workspace
        if self.model_dir:
            env["GPUPOOL_MODEL_DIR"] = self.model_dir
        if self.environment is not None:
            self.environment.apply(env)
        env["GPUPOOL_METRICS_FILE"] = self.metrics_file()
        return env

    def metrics_file(self) -> str:
        """The file the job appends its metrics to (the runner follows it)."""
        return job_metrics_file(self.output_dir, self.attempt)

    def job_dirs(self) -> list[str]:
        """The directories a job may write: its outputs, its checkpoints, its workdir (or its
        unpacked code), its user's workspace."""
        dirs = [self.output_dir, self.checkpoint_dir]
        return dirs + [d for d in (self.workdir, self.code_dir, self.workspace) if d]

    def readonly_dirs(self) -> list[str]:
        """What the job may read and not change: its model version's files, its
        environment and the interpreter that environment runs on."""
        dirs = [self.model_dir] if self.model_dir else []
        if self.environment is not None:
            dirs += self.environment.workload_dirs()
        return dirs

    def cwd(self) -> str:
        """Where the job starts: its workdir, else its code, else its workspace, else its
        output directory."""
        return self.workdir or self.code_dir or self.workspace or self.output_dir

    def cgroup_name(self) -> str:
        return cgroup_name(self.job_id, self.attempt, self.output_dir)


def cgroup_name(job_id: int, attempt: int, output_dir: str) -> str:
    """Unique on the machine: nodes of a pool (and servers) on one machine each number
    their jobs from 1, so the name carries a digest of the job's own directory."""
    import hashlib

    where = hashlib.sha256(os.path.realpath(output_dir).encode()).hexdigest()[:10]
    return f"job-{job_id}-attempt-{attempt}-{where}"


def load_spec(attempt_dir: str) -> RunnerSpec:
    """Read and validate ATTEMPT_DIR/spec.json; raise SpecError with a readable reason."""
    try:
        with open(os.path.join(attempt_dir, SPEC_FILE), "rb") as f:
            raw = json.loads(f.read())
    except OSError as e:
        raise SpecError(f"cannot read {SPEC_FILE}: {e.strerror}") from e
    except ValueError as e:
        raise SpecError(f"{SPEC_FILE} is not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise SpecError(f"{SPEC_FILE} must hold a JSON object")
    return RunnerSpec(raw)


def _command(value: object) -> list[str]:
    if not isinstance(value, list) or not value or not _all_str(value):
        raise SpecError("command must be a non-empty list of strings")
    return value


def _env(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not _all_str(value) or not _all_str(value.values()):
        raise SpecError("env must map strings to strings")
    return value


def _all_str(items: Iterable[object]) -> bool:
    return all(isinstance(item, str) for item in items)


def _int(raw: dict[str, object], key: str) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(f"{key} must be an integer")
    return value


def _non_negative(raw: dict[str, object], key: str) -> float:
    value = raw.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise SpecError(f"{key} must be a non-negative number")
    return value


def _str(raw: dict[str, object], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise SpecError(f"{key} must be a non-empty string")
    return value


def _optional_str(raw: dict[str, object], key: str) -> str | None:
    value = raw.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SpecError(f"{key} must be a string or null")
    return value


def _str_list(raw: dict[str, object], key: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not _all_str(value):
        raise SpecError(f"{key} must be a list of strings")
    return value


def _account(value: object) -> dict[str, object] | None:
    if value is None:
        return None
    ids = ("uid", "gid")
    if not isinstance(value, dict) or not all(_is_int(value.get(k)) for k in ids):
        raise SpecError("account must be an object with integer uid and gid")
    if value["uid"] == 0:
        raise SpecError("a job never runs as root")
    groups = value.get("groups") or []
    if not isinstance(groups, list) or not all(_is_int(g) for g in groups):
        raise SpecError("account.groups must be a list of integers")
    return value


def _gpu_memory(value: object) -> dict[str, object] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError("gpu_memory must be an object")
    limits = _number_map(value.get("limits"), "gpu_memory.limits")
    value["limits"] = {uuid: int(limit) for uuid, limit in limits.items()}
    if not isinstance(value.get("sampler"), str):
        raise SpecError("gpu_memory.sampler must be a string")
    return value


def _number_map(value: object, key: str) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and _is_number(v) for k, v in value.items()
    ):
        raise SpecError(f"{key} must map strings to numbers")
    return value


def _optional_positive(raw: object, key: str) -> float | None:
    value = raw.get(key) if isinstance(raw, dict) else None
    if value is None:
        return None
    if not _is_number(value) or value <= 0:
        raise SpecError(f"limits.{key} must be a positive number")
    return value


def _optional_int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class SandboxPolicy:
    """What the sandbox shows, from spec.json's ``sandbox`` object.

    ``readonly``: host paths shown read-only at the same place (the system, the Python the
    server runs on, an admin's dataset directories); a symbolic link is recreated as a link.
    ``readwrite``: host paths an admin shares read-write with every job.
    ``hidden``: paths never shown, even below a path that is (the data directory).
    ``devices``: ``[host path, path inside]`` of each device node (the job's GPUs and the
    NVIDIA control devices). ``mounts``: ``[host path, path inside]`` of each directory shown
    read-only somewhere else than where it is on the host (the dataset versions the job
    reads, from the node's cache), ``[host path, path inside, "rw"]`` read-write (its
    volumes). ``mps_pipe_dir``: an MPS control daemon's directory,
    shown when one runs. ``network``: the job's own network namespace or the node's
    (``NetworkPolicy``). ``shm_bytes``: the size of its /dev/shm, a tmpfs (None: tmpfs's
    default, half the node's memory), given to bwrap when ``bwrap_size`` says it takes
    ``--size``.
    """

    __slots__ = (
        "bwrap",
        "setpriv",
        "shell",
        "readonly",
        "readwrite",
        "hidden",
        "devices",
        "mounts",
        "network",
        "shm_bytes",
        "bwrap_size",
    )

    def __init__(self, raw: object) -> None:
        if not isinstance(raw, dict):
            raise SpecError("sandbox must be an object")
        self.bwrap: str = _sandbox_path(raw, "bwrap")
        self.setpriv: str | None = _optional_sandbox_path(raw, "setpriv")
        self.shell: str = raw.get("shell") or "/bin/sh"
        self.readonly: list[str] = _sandbox_paths(raw, "readonly")
        self.readwrite: list[str] = _sandbox_paths(raw, "readwrite")
        self.hidden: list[str] = _sandbox_paths(raw, "hidden")
        self.devices: list[tuple[str, str]] = _devices(raw.get("devices"))
        self.mounts: list[tuple[str, str, bool]] = _mounts(raw.get("mounts"))
        self.network = NetworkPolicy(raw.get("network"))
        self.shm_bytes: int | None = _shm_bytes(raw.get("shm_bytes"))
        self.bwrap_size: bool = raw.get("bwrap_size", True) is not False


class DatasetSpec:
    """spec.json's ``datasets`` item: a dataset version the job reads. ``manifest``: its
    manifest's SHA-256 (hex), a blob of the dataset ``store``; ``path``: where the node keeps
    it materialised (its cache); ``label``: NAME:VERSION, for messages; ``cache_max_bytes``:
    what the node's cache may take (past it the least recently used versions no job holds
    are removed; 0: no limit); ``s3``: the S3-compatible store's endpoint, bucket, prefix
    and region when the blobs are kept there (the node fetches them: no credentials here),
    else None (the blobs are files below ``store``)."""

    __slots__ = ("label", "manifest", "store", "path", "cache_max_bytes", "s3")

    def __init__(self, raw: object) -> None:
        if not isinstance(raw, dict):
            raise SpecError("each of datasets must be an object")
        manifest = raw.get("manifest")
        if not isinstance(manifest, str) or not re.fullmatch(r"[0-9a-f]{64}", manifest):
            raise SpecError("datasets[].manifest must be 64 hex digits")
        self.manifest: str = manifest
        self.label: str = f"{raw.get('name')}:{raw.get('version')}"
        self.store: str = _sandbox_path(raw, "store")
        self.path: str = _sandbox_path(raw, "path")
        limit = raw.get("cache_max_bytes") or 0
        if not isinstance(limit, int) or limit < 0:
            raise SpecError("datasets[].cache_max_bytes must be a count of bytes")
        self.cache_max_bytes: int = limit
        s3 = raw.get("s3")
        names = ("endpoint", "bucket", "prefix", "region")
        if s3 is not None and (
            not isinstance(s3, dict) or not all(isinstance(s3.get(n), str) for n in names)
        ):
            raise SpecError("datasets[].s3 must name its endpoint, bucket, prefix and region")
        self.s3: dict[str, str] | None = {n: s3[n] for n in names} if s3 else None


def _datasets(value: object) -> list[DatasetSpec]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError("datasets must be a list")
    return [DatasetSpec(item) for item in value]


class EnvironmentSpec:
    """spec.json's ``environment``: a Python environment the job runs with.

    ``id``, ``name``: which (``label`` shows both); ``dir``: where it is on this node (a
    registered ``prefix``'s own path, else the node's environments directory and its id's
    hex digits); the rest only for building one that is not there yet (``runner.envbuild``):
    ``lock`` (its packages, pinned with hashes), ``python`` (this node's interpreter of its
    Python version, and ``python_version``), ``uv``, uv's ``cache`` directory, ``index`` (uv's
    index options), ``uv_env`` (uv's environment: no configuration files, no downloads of
    interpreters), ``shown`` (paths the build reads: the interpreter's prefix, local indexes),
    ``timeout`` (seconds) and ``max_bytes`` (what the node's environments may take; 0: no
    limit).
    """

    __slots__ = (
        "id",
        "name",
        "dir",
        "prefix",
        "lock",
        "python",
        "python_version",
        "uv",
        "cache",
        "index",
        "uv_env",
        "shown",
        "timeout",
        "max_bytes",
    )

    def __init__(self, raw: object) -> None:
        if not isinstance(raw, dict):
            raise SpecError("environment must be an object")
        self.id: str = _str(raw, "id")
        self.name: str = _str(raw, "name")
        self.dir: str = _sandbox_path(raw, "dir")
        self.prefix: bool = raw.get("prefix") is True
        self.lock: str | None = _optional_str(raw, "lock")
        self.python: str = "" if self.prefix else _str(raw, "python")
        self.python_version: str = str(raw.get("python_version") or "")
        self.uv: str = "" if self.prefix else _sandbox_path(raw, "uv")
        self.cache: str = "" if self.prefix else _sandbox_path(raw, "cache")
        self.index: list[str] = _str_list(raw, "index")
        self.uv_env: dict[str, str] = _env(raw.get("uv_env"))
        self.shown: list[str] = _sandbox_paths(raw, "shown")
        self.timeout: float = float(raw.get("timeout") or 1800)
        # what the node's environments may take: past it, the least recently used go
        self.max_bytes: int = int(raw.get("max_bytes") or 0)
        if not self.prefix and self.lock is None:
            raise SpecError("environment.lock is needed unless it is a prefix")

    @property
    def label(self) -> str:
        return f"{self.name}@{self.id.split(':', 1)[-1][:12]}"

    def apply(self, env: dict[str, str]) -> None:
        """Its bin/ first on the job's PATH (so ``python`` is its own), and its name."""
        path = env.get("PATH") or os.defpath
        env["PATH"] = os.path.join(self.dir, "bin") + os.pathsep + path
        env["GPUPOOL_ENVIRONMENT"] = self.label
        if not self.prefix:
            env["VIRTUAL_ENV"] = self.dir
        else:
            env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONHOME", None)

    def workload_dirs(self) -> list[str]:
        """What a job shows of it, read-only: it, and the interpreter its bin/python links
        to (recorded when it was built)."""
        dirs = [self.dir]
        if not self.prefix:
            try:
                with open(os.path.join(self.dir, ".gpupool-env.json"), encoding="utf-8") as f:
                    home = json.load(f).get("python_home")
            except (OSError, ValueError):
                home = None
            if isinstance(home, str) and home.startswith("/"):
                dirs.append(home)
        return dirs


class NetworkPolicy:
    """spec.json's ``sandbox.network``: ``{"mode": "isolated", "egress": pasta's path or
    null, "port": the port a serving workload listens on inside, or null, "api": {"port":
    where the workload's own loopback offers the platform's API (``gpupool`` in a notebook's
    terminal), "socket": the server's Unix socket the bridge relays it to} or null}``. Mode
    ``host`` (or no object at all) keeps the node's network."""

    __slots__ = ("isolated", "egress", "port", "api")

    def __init__(self, raw: object) -> None:
        if raw is None:
            raw = {"mode": "host"}
        if not isinstance(raw, dict) or raw.get("mode") not in ("isolated", "host"):
            raise SpecError("sandbox.network.mode must be 'isolated' or 'host'")
        self.isolated: bool = raw["mode"] == "isolated"
        egress = raw.get("egress")
        if egress is not None and not (isinstance(egress, str) and egress.startswith("/")):
            raise SpecError("sandbox.network.egress must be an absolute path or null")
        self.egress: str | None = egress
        self.port: int | None = _port(raw, "port")
        self.api: tuple[int, str] | None = _api(raw.get("api"))


class FencePolicy:
    """spec.json's ``fence`` (only a task of a gang over several nodes has one)::

    {"nft": nft's path or null, "dir": the node's fence directory, "table": the
     node's table, "platform_uids": [socket owners the platform's ports accept],
     "platform_pids": [roots of the node's platform processes] (optional: else all
     the listeners of the platform's accounts),
     "open_ports": [platform ports left open: the server's API], "closed_ranges":
     [[first, last], ...] (Ray's worker ports), "rendezvous": [this task's gang's
     ports on this node], "peers": [the gang's nodes' IP addresses], "netns": null, or
     a /proc/PID[/task/TID]/ns/net to fence instead of the runner's own (tests)}
    """

    __slots__ = (
        "nft",
        "dir",
        "table",
        "platform_uids",
        "platform_pids",
        "open_ports",
        "closed_ranges",
        "rendezvous",
        "peers",
        "netns",
    )

    def __init__(self, raw: object) -> None:
        if not isinstance(raw, dict):
            raise SpecError("fence must be an object")
        self.nft: str | None = _fence_path(raw, "nft", optional=True)
        self.dir: str = _fence_path(raw, "dir")  # type: ignore[assignment] - not optional
        self.table: str = _table(raw.get("table", FENCE_TABLE_PREFIX))
        self.platform_uids: list[int] = uid_list(raw.get("platform_uids"))
        pids = raw.get("platform_pids") or []
        if not isinstance(pids, list) or not all(_is_id(p) and p > 0 for p in pids):
            raise SpecError("fence.platform_pids must be a list of process ids")
        self.platform_pids: list[int] = pids
        self.open_ports: list[int] = port_list(raw, "open_ports")
        self.closed_ranges: list[tuple[int, int]] = _ranges(raw.get("closed_ranges"))
        self.rendezvous: list[int] = port_list(raw, "rendezvous")
        self.peers: list[str] = ip_list(raw.get("peers"))
        netns = raw.get("netns")
        if netns is not None and not (isinstance(netns, str) and NETNS.match(netns)):
            raise SpecError("fence.netns must be /proc/PID[/task/TID]/ns/net or null")
        self.netns: str | None = netns


def _sandbox_path(raw: dict[str, object], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(f"sandbox.{key} must be an absolute path")
    return value


def _optional_sandbox_path(raw: dict[str, object], key: str) -> str | None:
    return None if raw.get(key) is None else _sandbox_path(raw, key)


def _sandbox_paths(raw: dict[str, object], key: str) -> list[str]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(
        isinstance(p, str) and p.startswith("/") for p in value
    ):
        raise SpecError(f"sandbox.{key} must be a list of absolute paths")
    return value


def _devices(value: object) -> list[tuple[str, str]]:
    pairs = value or []
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):
        raise SpecError("sandbox.devices must be a list of [host path, path inside] pairs")
    return [(host, inside) for host, inside in pairs]


def _shm_bytes(value: object) -> int | None:
    if value is not None and (not _is_int(value) or value <= 0):  # 0 would be no limit
        raise SpecError("sandbox.shm_bytes must be a positive whole number of bytes")
    return value  # type: ignore[return-value]


def _mounts(value: object) -> list[tuple[str, str, bool]]:
    """``(host path, path inside, read-write)`` of each mount."""
    pairs = value or []
    if not isinstance(pairs, list) or not all(
        isinstance(p, list)
        and (len(p) == 2 or (len(p) == 3 and p[2] == "rw"))
        and all(isinstance(x, str) and x.startswith("/") and "\0" not in x for x in p[:2])
        for p in pairs
    ):
        raise SpecError('sandbox.mounts must be a list of [host path, path inside(, "rw")]')
    return [(p[0], p[1], len(p) == 3) for p in pairs]


def _port(raw: dict[str, object], key: str) -> int | None:
    port = raw.get(key)
    if port is not None and (not isinstance(port, int) or not 0 < port < 65536):
        raise SpecError(f"sandbox.network.{key} must be a TCP port or null")
    return port


def _api(raw: object) -> tuple[int, str] | None:
    if raw is None:
        return None
    path = raw.get("socket") if isinstance(raw, dict) else None
    port = _port(raw, "port") if isinstance(raw, dict) else None
    if port is None or not isinstance(path, str) or not path.startswith("/"):
        raise SpecError("sandbox.network.api must be {port, socket} or null")
    return port, path


def _fence_path(raw: dict[str, object], key: str, optional: bool = False) -> str | None:
    value = raw.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(f"fence.{key} must be an absolute path" + (" or null" if optional else ""))
    return value


def _table(value: object) -> str:
    if not isinstance(value, str) or not TABLE.match(value):
        raise SpecError("fence.table must be an nftables name (letters, digits, '_')")
    return value


def uid_list(value: object) -> list[int]:
    """A non-empty list of Unix ids (the fence's, and a gang's record's)."""
    if not isinstance(value, list) or not value or not all(_is_id(v) for v in value):
        raise SpecError("fence.platform_uids must be a non-empty list of uids")
    return value


def port_list(raw: dict[str, object], key: str) -> list[int]:
    """``raw[key]``, a list of TCP ports (absent: none)."""
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(_is_port(v) for v in value):
        raise SpecError(f"fence.{key} must be a list of TCP ports")
    return value


def _ranges(value: object) -> list[tuple[int, int]]:
    ranges = []
    for item in value or []:
        if not (isinstance(item, list) and len(item) == 2 and all(_is_port(p) for p in item)):
            raise SpecError("fence.closed_ranges must be [[first, last], ...] of TCP ports")
        if item[0] > item[1]:
            raise SpecError("fence.closed_ranges: a range's first port comes before its last")
        ranges.append((item[0], item[1]))
    return ranges


def ip_list(value: object) -> list[str]:
    """A list of IP addresses, normalised (absent: none)."""
    import ipaddress  # only a gang's task over several nodes pays for it

    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError("fence.peers must be a list of IP addresses")
    try:
        return [str(ipaddress.ip_address(v)) for v in value]
    except ValueError as e:
        raise SpecError(f"fence.peers must be a list of IP addresses: {e}") from e


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_port(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


HOST_HELPERS = "/run/gpupool/host"  # in an image's sandbox: the host's setpriv and its libraries


def image_json(
    *,
    root: str,
    workdir: str,
    libraries: list[tuple[str, str]],
    setpriv: list[str] | None = None,
) -> dict[str, object]:
    """spec.json's ``image`` (``ImageSpec``): ``libraries``: ``(host path, path inside)``
    of the driver libraries shown; ``setpriv``: the host's setpriv, then its dynamic loader,
    then the libraries it loads (``ldd``), for a job run under its own account."""
    return {
        "root": root,
        "workdir": workdir,
        "libraries": [list(pair) for pair in libraries],
        "setpriv": list(setpriv or []),
    }


class ImageSpec:
    """spec.json's ``image``: a container image's unpacked tree, bound read-only as the
    sandbox's root (the host's system is not shown), ``{"root": its rootfs on this node,
    "workdir": where a job without a working directory starts (the image's WorkingDir, or
    ""), "libraries": [[host path, path inside], ...] (the NVIDIA driver's libraries, for a
    job given GPUs), "setpriv": [setpriv, loader, library, ...] (host paths; shown in
    HOST_HELPERS: the image has no setpriv of the host's kind)}``."""

    __slots__ = ("root", "workdir", "libraries", "setpriv")

    def __init__(self, raw: object) -> None:
        if not isinstance(raw, dict):
            raise SpecError("image must be an object")
        root = raw.get("root")
        if not isinstance(root, str) or not root.startswith("/"):
            raise SpecError("image.root must be an absolute path")
        self.root: str = root
        workdir = raw.get("workdir") or ""
        if not isinstance(workdir, str) or (workdir and not workdir.startswith("/")):
            raise SpecError("image.workdir must be an absolute path or empty")
        self.workdir: str = workdir
        self.libraries: list[tuple[str, str]] = _devices(raw.get("libraries"))
        helpers = raw.get("setpriv") or []
        if not isinstance(helpers, list) or not all(
            isinstance(p, str) and p.startswith("/") for p in helpers
        ):
            raise SpecError("image.setpriv must be a list of absolute paths")
        self.setpriv: list[str] = list(helpers)

    def helper_mounts(self) -> list[tuple[str, str]]:
        """``(host path, path inside)`` of setpriv and what it loads, by file name."""
        return [(path, f"{HOST_HELPERS}/{os.path.basename(path)}") for path in self.setpriv]

    def setpriv_argv(self) -> list[str]:
        """How the host's setpriv is started inside the image: by the host's own loader, on
        the host's libraries (nothing of them reaches the job it starts)."""
        if len(self.setpriv) < 2:
            raise SpecError("image.setpriv is needed to run a job under another account")
        setpriv, loader = (f"{HOST_HELPERS}/{os.path.basename(p)}" for p in self.setpriv[:2])
        return [loader, "--library-path", HOST_HELPERS, setpriv]
