"""A server killed between recording a job over two nodes as launched and recording what it
launched (the attempt's executor state) finds every task of the gang again when it restarts:
the job goes on as one, its log has both tasks, and a cancel stops both (none is left running,
holding its GPUs)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.runner import layout
from tests.support.cli import Cli, wait_for, wait_status
from tests.support.pool import Pool, need_loopback_namespace


@pytest.fixture
def own_pool(tmp_path: Path) -> Iterator[Pool]:
    """The server's node ``head`` (2 A100) and ``n1`` (2 A100): a gang of two goes on both."""
    need_loopback_namespace()
    pool = Pool.start(tmp_path)
    try:
        pool.join("n1", "2xA100-SXM4-80GB:80GiB", timeout=300)
        yield pool
    finally:
        pool.stop()


def test_every_task_of_a_gang_is_found_again_and_stopped_by_a_cancel(own_pool: Pool) -> None:
    cli = Cli(own_pool.server.url, own_pool.server.token)
    script = 'echo "up $GPUPOOL_TASK_INDEX"; exec sleep 600'
    job_id = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--", "sh", "-c", script)
    wait_status(cli, job_id, {"running"}, timeout=180)
    wait_for(lambda: cli.ok("logs", str(job_id)).count("up ") == 2, 120, "both tasks")
    own_pool.server.kill9()
    forget_what_was_launched(own_pool.server.data_dir / "gpupool.db", job_id)

    own_pool.server.start(timeout=180)
    wait_for(lambda: readopted(cli, job_id), 120, "the gang to be re-adopted")
    assert cli.job(job_id)["attempts"] == 1
    cli.ok("cancel", str(job_id))
    assert wait_status(cli, job_id, {"cancelled", "failed", "lost"}, 120)["status"] == "cancelled"
    for attempt in task_attempts(own_pool, job_id):
        wait_for(lambda a=attempt: exit_record(a), 120, f"the task at {attempt} to end")


def forget_what_was_launched(database: Path, job_id: int) -> None:
    """As if the server died before recording the launch: the attempt without its state."""
    with sqlite3.connect(database) as db:
        changed = db.execute(
            "UPDATE attempts SET executor_state = NULL WHERE job_id = ?", (job_id,)
        ).rowcount
    assert changed == 1


def readopted(cli: Cli, job_id: int) -> bool:
    events = cli.json("show", str(job_id))["events"]
    return any(event["reason"] == "Readopted" for event in events)


def task_attempts(pool: Pool, job_id: int) -> list[Path]:
    """Each task's attempt directory, on its node: the server's own node and n1."""
    nodes = [pool.server.data_dir / "cluster" / "node", pool.nodes["n1"].data_dir]
    found = [node / "jobs" / str(job_id) / "attempts" / "1" for node in nodes]
    assert all(attempt.is_dir() for attempt in found), found
    return found


def exit_record(attempt: Path) -> dict | None:
    record = layout.read_json(attempt / layout.STATE_FILE)
    return record if record is not None and "exit_code" in record else None
