"""The runner's input, ATTEMPT_DIR/spec.json, and the workload's environment (stdlib only)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from gpupool.runner.layout import SPEC_FILE, SPEC_VERSION

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
        "gpu_uuids",
        "log_limit_bytes",
        "stop_grace_seconds",
        "checkpoint_dir",
        "output_dir",
        "notify_fifo",
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
        self.gpu_uuids: list[str] = _str_list(raw, "gpu_uuids")
        self.log_limit_bytes: int = int(_non_negative(raw, "log_limit_bytes"))
        self.stop_grace_seconds: float = float(_non_negative(raw, "stop_grace_seconds"))
        self.checkpoint_dir: str = _str(raw, "checkpoint_dir")
        self.output_dir: str = _str(raw, "output_dir")
        self.notify_fifo: str | None = _optional_str(raw, "notify_fifo")

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
        return env


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
