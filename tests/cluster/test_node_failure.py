"""A node that dies during a job over two nodes (its own pool: the server's node ``head`` and
``n1``, ``n2``, all with H100s): the server sees it down, fences its GPUs until the node must
have stopped its work, then stops the job's other task, frees the GPUs of both nodes and
requeues the job within its retries; it completes on the nodes left."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.cleanup import kill_leftovers
from tests.support.cli import Cli, wait_for, wait_status
from tests.support.pool import Pool, kill_recorded, need_loopback_namespace

H100 = "2xH100-SXM5-80GB:80GiB"


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[Pool]:
    need_loopback_namespace()
    pool = Pool.start(tmp_path, head_gpus=H100)
    try:
        pool.join("n1", H100)
        pool.join("n2", H100)
        yield pool
    finally:
        pool.stop()


def die(pool: Pool, name: str) -> None:
    """The machine of ``name`` goes away: its joiner, its Ray node and its jobs' processes."""
    node = pool.nodes[name]
    os.kill(node.process.pid, signal.SIGKILL)
    node.process.wait(10)
    kill_recorded(node.data_dir / "cluster" / "node.json")
    kill_leftovers(node.data_dir / "jobs")


def node_state(cli: Cli, name: str) -> str:
    return next(n["state"] for n in cli.json("nodes") if n["name"] == name)


def runners(data_dir: Path, job_id: int) -> list[int]:
    """Live processes of the job's runners on a node (from their records)."""
    import json

    alive = []
    for state in data_dir.glob(f"jobs/{job_id}/attempts/*/state.json"):
        pid = json.loads(state.read_text()).get("runner_pid")
        if pid and psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
            alive.append(pid)
    return alive


def test_a_dead_node_requeues_its_job_frees_both_nodes_and_the_job_completes(
    three_nodes: Pool, exchange: Path
) -> None:
    cli = Cli(three_nodes.server.url, three_nodes.server.token)
    marker = exchange / "go"
    program = (
        "import os, pathlib, time\n"
        f"go = pathlib.Path({str(marker)!r})\n"
        "print('task', os.environ['GPUPOOL_TASK_INDEX'], 'on', os.environ['GPUPOOL_NODE'])\n"
        "while not go.exists(): time.sleep(0.1)\n"
    )
    job_id = cli.submit(
        *("--workdir", str(exchange), "--nodes", "2", "--gpus-per-node", "2"),
        *("--retries", "1", "--", sys.executable, "-c", program),
    )
    job = wait_status(cli, job_id, {"running"}, timeout=120)
    first = [task["node"] for task in job["placement"]["tasks"]]
    victim = "n2" if "n2" in first else "n1"
    survivor = next(node for node in first if node != victim)

    died = time.monotonic()
    die(three_nodes, victim)
    wait_for(lambda: node_state(cli, victim) == "down", 60, f"{victim} to be down")
    print(f"node died -> down: {time.monotonic() - died:.1f} s")  # shown with -s, not asserted
    wait_for(lambda: cli.job(job_id)["attempts"] == 2, 180, "the job to be requeued")
    print(f"node died -> job started again: {time.monotonic() - died:.1f} s")
    marker.touch()
    job = wait_status(cli, job_id, {"succeeded", "failed", "lost"}, timeout=180)

    assert job["status"] == "succeeded", job
    again = {task["node"] for task in job["placement"]["tasks"]}
    assert victim not in again
    events = [(e["reason"], e["message"]) for e in job["events"]]
    assert any(r == "Requeued" and "retry 1 of 1" in m for r, m in events), events
    nodes = {n["name"]: n for n in cli.json("nodes")}
    assert nodes[victim]["state"] == "down"
    assert all(not g.get("holders") for n in nodes.values() for g in n["gpus"])
    survivor_dir = (
        three_nodes.server.data_dir / "cluster" / "node"
        if survivor == "head"
        else three_nodes.nodes[survivor].data_dir
    )
    assert runners(survivor_dir, job_id) == []  # nothing of the first attempt is left
