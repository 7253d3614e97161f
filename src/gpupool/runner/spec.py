"""The runner's input, ATTEMPT_DIR/spec.json, and the workload's environment (stdlib only)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from gpupool.runner.layout import SPEC_FILE, SPEC_VERSION, job_metrics_file

# No dataclasses, pathlib or typing here: importing them costs the runner's start time.


class SpecError(Exception):
    """spec.json is missing or malformed."""


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
        "workspace",
        "gpu_uuids",
        "log_limit_bytes",
        "stop_grace_seconds",
        "checkpoint_dir",
        "output_dir",
        "notify_fifo",
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
        self.sandbox = _sandbox(raw.get("sandbox"))
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
        self.fence = _fence(raw.get("fence"))

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


def _sandbox(value: object) -> object:
    if value is None:
        return None
    from gpupool.runner.sandbox import SandboxPolicy  # here: sandbox imports this module

    return SandboxPolicy(value)


def _fence(value: object) -> object:
    if value is None:
        return None
    from gpupool.runner.fence import FencePolicy  # here: fence imports this module

    return FencePolicy(value)


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
