"""A task for executor and runner tests: what the control loop asks an executor to start."""

from __future__ import annotations

from typing import Any

from gpupool.executors.task import TaskSpec


def task(
    command: list[str] | None = None, job_id: int = 1, attempt: int = 1, **overrides: Any
) -> TaskSpec:
    """Attempt ``attempt`` of job ``job_id`` on the node "local": ``command`` (``true`` unless
    told), no environment, working directory nor GPU, a 1 MiB log and a 10 s stop grace;
    ``overrides``: any other field of TaskSpec (user, cpus, gpu_grants, task_index ...)."""
    fields: dict[str, Any] = {
        "job_id": job_id,
        "attempt": attempt,
        "node": "local",
        "command": command if command is not None else ["true"],
        "env": {},
        "workdir": None,
        "gpu_uuids": [],
        "log_limit_bytes": 1 << 20,
        "stop_grace_seconds": 10.0,
    }
    fields.update(overrides)
    return TaskSpec(**fields)
