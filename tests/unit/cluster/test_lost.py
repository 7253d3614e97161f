"""A node that lost its head stops its own work: every attempt under its jobs directory that
runs, or may still start, is stopped with the local executor's own stop, rebuilt from what
its runner recorded; ended attempts are left alone."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cleanup import kill_leftovers
from tests.support.waiting import wait_for

from gpupool.cluster.lost import stop_own_work
from gpupool.executors.local import LocalExecutor
from gpupool.executors.task import Observed, TaskSpec
from gpupool.runner import layout

SLEEPS = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"]


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "jobs"
    yield path
    kill_leftovers(path)


def task(job_id: int, command: list[str]) -> TaskSpec:
    return TaskSpec(
        job_id=job_id,
        attempt=1,
        node="n1",
        command=command,
        env={},
        workdir=None,
        gpu_uuids=[],
        log_limit_bytes=1 << 20,
        stop_grace_seconds=600.0,
    )


def test_running_attempts_are_stopped_and_ended_ones_left_alone(jobs_dir: Path) -> None:
    agent = LocalExecutor(jobs_dir)  # what the node's agent ran them with
    running = agent.start(task(1, SLEEPS))
    ended = agent.start(task(2, [sys.executable, "-c", "pass"]))
    wait_for(lambda: "ready" in text(agent.log_path(running)), 30, "job 1 to be ready")
    wait_for(lambda: agent.poll(ended).observed == Observed.EXITED, 30, "job 2 to end")
    not_started = jobs_dir / "3" / "attempts" / "1"
    not_started.mkdir(parents=True)  # recorded, its runner not launched yet

    stopped = stop_own_work(jobs_dir, grace_seconds=5.0)

    assert [(h.job_id, h.attempt) for h in stopped] == [(1, 1)]
    result = wait_for(
        lambda: (r := agent.poll(running)).observed == Observed.EXITED and r, 30, "job 1 to end"
    )
    assert result.exit_code == 128 + signal.SIGTERM
    assert agent.poll(ended).exit_code == 0
    assert layout.read_json(not_started / layout.STOP_FILE) == {"grace_seconds": 0}
    assert stop_own_work(jobs_dir, grace_seconds=5.0) == []  # nothing runs any more
    agent.close()


def text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
