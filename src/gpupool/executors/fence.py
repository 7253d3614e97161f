"""The node's fence for a task of a gang over several nodes, as its runner is told.

Such a task keeps the node's network (NCCL and RDMA need it); ``fence_spec`` gives spec.json's
``fence`` (``gpupool.runner.fence``, which applies it): the platform's accounts, the ports
that stay open to jobs, Ray's worker port range, and the gang's own rendezvous ports on this
node with its nodes' addresses (from the gang's launch plan, ``executors.gang.fenced``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from typing import Any

import psutil

from gpupool.executors.task import TaskSpec
from gpupool.runner import wire
from gpupool.runner.fence import table_name
from gpupool.settings import Settings

FENCE_DIR = ".fence"  # in the node's jobs directory: the gangs' records, the platform's
# ray start's --min-worker-port/--max-worker-port defaults, which the pool's nodes keep: each
# Ray worker (a node agent among them) serves in that range
RAY_WORKER_PORTS = (10002, 19999)


def fence_spec(task: TaskSpec, settings: Settings, nft: str | None) -> dict[str, Any] | None:
    """spec.json's ``fence`` for a task of a gang over several nodes on the node's network;
    None for any other task (a single-node job has a network of its own)."""
    if task.task_count <= 1 or task.network != "host":
        return None
    gang = (task.launch or {}).get("fence") or {}
    fence_dir = str(settings.jobs_dir / FENCE_DIR)
    return wire.fence_json(
        nft=nft,
        fence_dir=fence_dir,
        table=table_name(fence_dir),
        # the platform's accounts: root, and the server's (a root server runs jobs under
        # their users' accounts, never under these)
        platform_uids=sorted({0, os.geteuid()}),
        platform_pids=platform_pids(),
        open_ports=[settings.port],  # the server's API, where it runs on this node
        closed_ranges=[RAY_WORKER_PORTS],
        rendezvous=list(gang.get("rendezvous") or []),
        peers=addresses(gang.get("peers") or []),
    )


def platform_pids() -> list[int]:
    """The node's Ray processes: the ``ray start`` this process (the node's agent) descends
    from, whose children are the node's raylet, GCS (on the head), dashboard, agents and
    workers; none found: every listener of the platform's accounts is fenced."""
    with contextlib.suppress(psutil.Error):
        for process in psutil.Process().parents():
            with contextlib.suppress(psutil.Error):
                if is_ray_start(process.cmdline()):
                    return [process.pid]
    return []


def is_ray_start(argv: list[str]) -> bool:
    """``ray start ...`` (the console script, or ``python -m ray.scripts.scripts start``)."""
    for arg, following in zip(argv, argv[1:], strict=False):
        ray = arg == "ray" or arg.endswith("/ray") or arg == "ray.scripts.scripts"
        if ray and following == "start":
            return True
    return False


def addresses(names: list[str]) -> list[str]:
    """The IP addresses of the gang's nodes (a node named by its host name is resolved)."""
    found: set[str] = set()
    for name in names:
        try:
            found.add(str(ipaddress.ip_address(name)))
        except ValueError:
            with contextlib.suppress(OSError):
                found.update(str(info[4][0]) for info in socket.getaddrinfo(name, None))
    return sorted(found)
