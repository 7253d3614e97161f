"""Where a task that listens (``TaskSpec.listen``) serves, given to it as ``PORT`` and
``GPUPOOL_LISTEN_HOST``:

- in a network namespace of its own (``network: isolated``), a fixed port on its own
  loopback, which nothing outside reaches but its runner's bridge: the platform connects to
  the runner's socket (``runner.bridge``), recorded as ``"socket"``; no port of the node is
  taken, so none can be squatted or called directly;
- on the node's network, a TCP port free on the address it binds, picked when it starts.

The handle's state keeps them (``"host"``, ``"port"``, ``"socket"``), which
``services.jobs`` (its endpoints) reads; an attempt recovered after a crash finds them again in the
runner's spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupool.executors.base import LaunchError, free_local_port
from gpupool.executors.task import TaskSpec
from gpupool.runner import layout
from gpupool.runner.network import LISTEN_SOCKET

HOST_VARIABLE = "GPUPOOL_LISTEN_HOST"
PORT_VARIABLE = "PORT"
ISOLATED_HOST = "127.0.0.1"  # the workload's own loopback
ISOLATED_PORT = 8000  # any port would do: the namespace is the workload's alone


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


def listen_inside(attempt_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    """The fixed port of a task with a network of its own, set in its ``env``; its handle's
    state names the runner's socket the platform connects to."""
    env.update({PORT_VARIABLE: str(ISOLATED_PORT), HOST_VARIABLE: ISOLATED_HOST})
    socket_path = str(attempt_dir / LISTEN_SOCKET)
    return {"host": ISOLATED_HOST, "port": ISOLATED_PORT, "socket": socket_path}


def recorded(attempt_dir: Path) -> dict[str, Any]:
    """Where an attempt listens, as its runner's spec says (nothing when it does not)."""
    spec = layout.read_json(attempt_dir / layout.SPEC_FILE) or {}
    env = spec.get("env")
    if not isinstance(env, dict) or HOST_VARIABLE not in env:
        return {}
    try:
        found = {"host": str(env[HOST_VARIABLE]), "port": int(env[PORT_VARIABLE])}
    except (KeyError, TypeError, ValueError):
        return {}
    network = (spec.get("sandbox") or {}).get("network") or {}
    if network.get("mode") == "isolated" and network.get("port") is not None:
        found["socket"] = str(attempt_dir / LISTEN_SOCKET)
    return found
