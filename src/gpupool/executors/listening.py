"""Where a task that listens (``TaskSpec.listen``) serves: a TCP port free on the address it
binds, picked when it starts and given to it as ``PORT`` and ``GPUPOOL_LISTEN_HOST``. Its
handle's state keeps both (``"host"``, ``"port"``), which ``services.endpoints`` reads; an
attempt recovered after a crash finds them again in the runner's spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupool.executors.base import LaunchError, TaskSpec, free_local_port
from gpupool.runner import layout

HOST_VARIABLE = "GPUPOOL_LISTEN_HOST"
PORT_VARIABLE = "PORT"


def listen(task: TaskSpec, host: str, env: dict[str, str]) -> dict[str, Any]:
    """A port free now on ``host``, set in the task's ``env`` (gpupool's value wins over a
    PORT of the job's own); ``{"host", "port"}`` for its handle's state."""
    try:
        port = free_local_port(host)
    except OSError as e:
        raise LaunchError(
            f"no free TCP port on {host} for job {task.job_id}: {e}",
            user_message=f"the node had no free TCP port on {host} for the job to listen on",
            reason="no_port",
        ) from e
    env.update({PORT_VARIABLE: str(port), HOST_VARIABLE: host})
    return {"host": host, "port": port}


def recorded(attempt_dir: Path) -> dict[str, Any]:
    """Where an attempt listens, as its runner's spec says (nothing when it does not)."""
    env = (layout.read_json(attempt_dir / layout.SPEC_FILE) or {}).get("env")
    if not isinstance(env, dict) or HOST_VARIABLE not in env:
        return {}
    try:
        return {"host": str(env[HOST_VARIABLE]), "port": int(env[PORT_VARIABLE])}
    except (KeyError, TypeError, ValueError):
        return {}
