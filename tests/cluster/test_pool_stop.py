"""Stopping a pool as docs/cluster.md says: a node's ``gpupool node join`` stopped with SIGTERM
stops its Ray node, and ``gpupool server --ray`` stopped stops the Ray head it started (GCS,
raylet, agents); nothing of either is left running."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.pool import Pool, need_loopback_namespace
from tests.support.waiting import wait_for


@pytest.fixture
def own_pool(tmp_path: Path) -> Iterator[Pool]:
    need_loopback_namespace()
    pool = Pool.start(tmp_path)
    try:
        pool.join("n1", "2xH100-SXM5-80GB:80GiB", timeout=300)
        yield pool
    finally:
        pool.stop()


def test_stopping_the_joiner_then_the_server_leaves_no_ray_process(own_pool: Pool) -> None:
    node = own_pool.nodes["n1"]
    node_session = recorded_session(node.data_dir / "cluster" / "node.json")
    head_session = recorded_session(own_pool.server.data_dir / "cluster" / "head.json")
    assert session_members(node_session) and session_members(head_session)

    node.process.send_signal(signal.SIGTERM)
    assert node.process.wait(60) == 0, node.output.read_text()
    assert "stopping the node" in node.output.read_text()
    assert session_members(node_session) == []

    server = own_pool.server.process
    assert server is not None
    server.send_signal(signal.SIGTERM)  # as a service manager stops it
    server.wait(120)  # ends by SIGTERM once it has shut down (uvicorn raises it again)
    left = ended(head_session)
    assert left == [], f"{left}\n{own_pool.server.output()[-3000:]}"
    assert ray_processes_of(own_pool) == []


def ended(session: int, timeout: float = 30.0) -> list[str]:
    """What is still in ``session`` after ``timeout`` (nothing: [] as soon as it is empty)."""
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not session_members(session), timeout, f"session {session} to end")
    return session_members(session)


def recorded_session(record: Path) -> int:
    """The session of the Ray node recorded at ``record``: its leader's pid."""
    return json.loads(record.read_text())["pid"]


def session_members(session: int) -> list[str]:
    """What runs in ``session``: each process's pid and command."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])}")
        except (OSError, psutil.Error):
            continue
    return found


def ray_processes_of(pool: Pool) -> list[str]:
    """Ray's processes that name the pool's Ray port (GCS, raylets, agents, workers)."""
    port = f":{pool.env['GPUPOOL_RAY_PORT']}"
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        command = " ".join(process.info["cmdline"] or [])
        if port in command and "ray" in command and process.info["status"] != "zombie":
            found.append(f"{process.info['pid']} {command[:200]}")
    return found
