"""A pool whose Ray head goes away (each test kills parts of its own pool): the server stays
up, says the cluster is unreachable, queues jobs and recovers when it has started the head
again, its nodes rejoining; a node that has lost its head stops its own work after the
pool's ``node_lost_seconds`` (5 s in these pools)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.executors.remains import Remains
from gpupool.runner import layout
from tests.support.cli import Cli, wait_for, wait_status
from tests.support.pool import Pool, kill_recorded, need_loopback_namespace

H100 = "4xH100-SXM5-80GB:80GiB"


@pytest.fixture
def own_pool(tmp_path: Path) -> Iterator[Pool]:
    """A pool of this test's own: the server (node ``head``) and ``n1`` with 4 H100."""
    need_loopback_namespace()
    pool = Pool.start(tmp_path)
    try:
        pool.join("n1", H100)
        yield pool
    finally:
        pool.stop()


def test_the_server_outlives_its_head_says_so_and_recovers_when_it_is_back(
    own_pool: Pool,
) -> None:
    cli = Cli(own_pool.server.url, own_pool.server.token)
    killed = time.monotonic()
    kill_recorded(own_pool.server.data_dir / "cluster" / "head.json")

    wait_for(lambda: cluster_health(own_pool) == "unreachable", what="health: unreachable")
    measured("head killed -> health says unreachable", killed)
    nodes = cli("nodes")
    assert nodes.returncode == 0, nodes.stderr
    assert "WARNING the Ray cluster at" in nodes.stderr and "unreachable" in nodes.stderr
    job_id = cli.submit("--gpus", "1", "--gpu-type", "H100", "--", "sh", "-c", "echo done")
    assert cli.job(job_id)["status"] == "pending"

    wait_for(lambda: cluster_health(own_pool) == "reachable", 180, "health: reachable again")
    measured("head killed -> health says reachable", killed)
    wait_for(lambda: node_state(cli, "n1") == "up", 180, "n1 to be up again")
    measured("head killed -> n1 up again", killed)
    job = wait_status(cli, job_id, {"succeeded", "failed", "lost"}, timeout=180)
    assert job["status"] == "succeeded", job
    assert job["placement"]["node"] == "n1"
    assert cli.ok("logs", str(job_id)).strip() == "done"
    joiner = own_pool.nodes["n1"]
    assert joiner.process.poll() is None, joiner.output.read_text()
    assert "joined the head at" in joiner.output.read_text()
    assert "WARNING" not in cli("nodes").stderr


def test_a_node_that_lost_its_head_stops_its_own_work(own_pool: Pool) -> None:
    cli = Cli(own_pool.server.url, own_pool.server.token)
    job_id = cli.submit("--gpus", "1", "--gpu-type", "H100", "--", "sleep", "600")
    wait_status(cli, job_id, {"running"})
    attempt = own_pool.nodes["n1"].data_dir / "jobs" / str(job_id) / "attempts" / "1"
    running = layout.read_json(attempt / layout.STATE_FILE)
    assert running is not None and workload(running), running
    own_pool.server.stop()  # it stops the head it started, and nobody starts the head again
    killed = time.monotonic()

    ended = wait_for(lambda: exit_record(attempt), 120, "the node to stop its job")
    measured("head killed -> the node's job stopped", killed)
    assert workload(ended) == [], ended
    joiner = own_pool.nodes["n1"]
    said = joiner.output.read_text()
    assert f"stopped this node's running work (job {job_id} attempt 1)" in said, said
    lost_for = float(said.split("has not answered for ")[1].split(" s")[0])
    assert lost_for >= 5.0  # GPUPOOL_NODE_LOST_SECONDS of the pool
    assert joiner.process.poll() is None, said  # it waits for the head to come back


def cluster_health(pool: Pool) -> str:
    return httpx.get(f"{pool.server.url}/api/v1/health", timeout=10).json()["cluster"]


def node_state(cli: Cli, name: str) -> str | None:
    found = [node for node in cli.json("nodes") if node["name"] == name]
    return found[0]["state"] if found else None


def workload(record: dict) -> list[int]:
    """What is alive of the attempt's workload: its sandbox and its process group. Not its
    cgroup: named by job and attempt, it is shared by the nodes of one machine (and every
    pool's job 1 is in job-1-attempt-1)."""
    return Remains().find({k: v for k, v in record.items() if k != "cgroup"})


def exit_record(attempt: Path) -> dict | None:
    record = layout.read_json(attempt / layout.STATE_FILE)
    return record if record is not None and "exit_code" in record else None


def measured(what: str, since: float) -> None:
    """For the record (shown with -s), never asserted: the machine's load sets it."""
    print(f"{what}: {time.monotonic() - since:.1f} s")
