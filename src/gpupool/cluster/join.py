"""``gpupool node join``: make this machine a node of a pool.

It shows the join token to the server, gets the Ray head's address and the pool's Ray
secret, starts a Ray node carrying the node's name (``ray start --address ... --block``, in
a session of its own), and waits until the server has discovered the node and may schedule
on it, saying how long that took. It then stays in the foreground, as a service manager or
a Kubernetes pod expects, and stops the node when it is stopped (SIGTERM, Ctrl-C).

The node's agent reads its settings from the ``GPUPOOL_*`` variables given to the Ray node:
its name, its data directory (its jobs' records and logs), its declared inventory.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.client.api import Client
from gpupool.cluster.process import RayProcess
from gpupool.cluster.rayenv import (
    LOOPBACK,
    LOOPBACK_SWITCH,
    TOKEN_FILE,
    node_resource,
    only_loopback,
    ray_environment,
    split_address,
    write_token,
)

WAIT_SCHEDULABLE_S = 120.0
LOOPBACK_ONLY = (
    "the pool's Ray head is at 127.0.0.1, which Ray rewrites to this machine's own address on "
    "a machine with other network interfaces: start the server with --host set to an address "
    "the nodes reach, or run the server and its nodes in a network namespace that holds only "
    "the loopback interface (unshare --net)"
)
NODE_RECORD = "node.json"


class JoinError(Exception):
    """The machine could not join; the message says why and what to do."""


@dataclass
class JoinRequest:
    server: str
    token: str
    name: str
    data_dir: Path
    declared: dict[str, str] = field(default_factory=dict)  # GPUPOOL_* name -> value


@dataclass
class Joined:
    node: RayProcess
    ray_seconds: float  # ray start until the Ray node ran
    schedulable_seconds: float  # ray start until the server may schedule on it


def default_name() -> str:
    return socket.gethostname() or "localhost"


def join(request: JoinRequest, say: Callable[[str], None] = print) -> Joined:
    """Start this machine's Ray node and wait until the pool schedules on it."""
    client = Client(request.server)
    answer = client.join(request.token)
    host, _ = split_address(answer["ray_address"])
    if host == LOOPBACK and not only_loopback():
        raise JoinError(LOOPBACK_ONLY)
    record = request.data_dir / "cluster" / NODE_RECORD
    env = node_env(request, answer)
    log_path = request.data_dir / "cluster" / "ray-node.log"
    if RayProcess.found(record, env, log_path) is not None:
        raise JoinError(
            f"a node of this data directory ({request.data_dir}) runs already: stop it first, "
            "or give another --data-dir and --name"
        )
    node = RayProcess(node_args(request, answer), env, log_path)
    began = time.monotonic()
    say(f"starting the Ray node of {request.name}, joining {answer['ray_address']}")
    node.start()
    node.save(record)
    ray_seconds = time.monotonic() - began
    wait_schedulable(client, request, node)
    return Joined(node, ray_seconds, time.monotonic() - began)


def node_args(request: JoinRequest, answer: dict) -> list[str]:
    return [
        f"--address={answer['ray_address']}",
        f"--resources={json.dumps({node_resource(request.name): 1})}",
        "--num-gpus=0",  # gpupool hands out GPUs itself; Ray must not set CUDA_VISIBLE_DEVICES
        f"--object-store-memory={answer['object_store_bytes']}",
        "--disable-usage-stats",
    ]


def node_env(request: JoinRequest, answer: dict) -> dict[str, str]:
    """Ray's variables (the secret kept in a 0600 file of the node's data directory) and the
    agent's settings."""
    token = write_token(request.data_dir / "cluster" / TOKEN_FILE, answer["ray_token"])
    host, _ = split_address(answer["ray_address"])
    env = ray_environment(token, host, answer["health_period_ms"], answer["health_failures"])
    # `ray start` refuses to start a worker with Ray's loopback switch: a node joins a head on
    # 127.0.0.1 only where that is the machine's one address (a namespace holding only lo).
    env.pop(LOOPBACK_SWITCH, None)
    env.update(request.declared)
    env["GPUPOOL_NODE_NAME"], env["GPUPOOL_DATA_DIR"] = request.name, str(request.data_dir)
    env["GPUPOOL_NODE_LOST_SECONDS"] = str(answer["node_lost_seconds"])
    return env


def wait_schedulable(client: Client, request: JoinRequest, node: RayProcess) -> None:
    deadline = time.monotonic() + WAIT_SCHEDULABLE_S
    while time.monotonic() < deadline:
        status = client.join(request.token, request.name)
        if status.get("node_schedulable"):
            return
        if status.get("node_up") and not status.get("node_schedulable"):
            return  # up and drained by an admin: joined all the same
        if not node.alive():
            raise JoinError(f"the Ray node ended: {node.tail()}")
        time.sleep(0.1)
    node.stop()
    raise JoinError(
        f"the server did not see node {request.name} within {WAIT_SCHEDULABLE_S:g} s: look at "
        "the server's log and at the node's log in "
        f"{request.data_dir / 'cluster' / 'ray-node.log'}"
    )


def stay(node: RayProcess, say: Callable[[str], None] = print) -> int:
    """Run until SIGTERM or SIGINT (then stop the node: 0) or until the node ends (1)."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    while not stopping.wait(1.0):
        if not node.alive():
            say(f"the Ray node ended: {node.tail()}")
            node.stop()
            return 1
    say("stopping the node")
    node.stop()
    return 0
