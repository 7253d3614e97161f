"""Runners launched through the fork server: same behaviour, and it may die without harm."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from executor_helpers import py, wait_for, wait_observed
from tests.support.tasks import task

from gpupool.executors.local import LocalExecutor
from gpupool.executors.task import Observed

SLEEP = "import time; print('ready', flush=True); time.sleep(600)"


def test_runners_come_from_the_fork_server_in_their_own_session(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "jobs")
    handle = executor.start(task(py(SLEEP)))
    wait_observed(executor, handle, Observed.RUNNING)
    runner = handle.state["runner_pid"]
    server = executor._fork_server._process.pid
    assert os.getsid(runner) == runner, "a runner leads its own session"
    assert os.getsid(runner) != os.getsid(server)
    executor.stop(handle, 1.0)
    assert wait_observed(executor, handle, Observed.EXITED).exit_code == 128 + signal.SIGTERM
    executor.close()


def test_runners_outlive_the_fork_server_and_it_is_restarted(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "jobs")
    first = executor.start(task(py(SLEEP), job_id=1))
    wait_observed(executor, first, Observed.RUNNING)
    old = executor._fork_server._process
    old.kill()
    old.wait()
    assert executor.poll(first).observed == Observed.RUNNING
    second = executor.start(task(py("print('second')"), job_id=2))
    assert wait_observed(executor, second, Observed.EXITED).exit_code == 0
    assert executor._fork_server._process.pid != old.pid
    executor.stop(first, 1.0)
    wait_observed(executor, first, Observed.EXITED)
    executor.close()


def test_closing_the_executor_leaves_running_attempts_alone(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "jobs")
    handle = executor.start(task(py(SLEEP)))
    wait_observed(executor, handle, Observed.RUNNING)
    state = executor.get_state(handle)
    executor.close()
    again = LocalExecutor(tmp_path / "jobs")
    adopted = again.load_state(state)
    assert again.poll(adopted).observed == Observed.RUNNING
    again.stop(adopted, 1.0)
    wait_for(lambda: again.poll(adopted).observed == Observed.EXITED, what="the stop")
    again.close()


def test_without_the_fork_server_runners_are_started_directly(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "jobs", fork_server=False)
    handle = executor.start(task(py("print('direct')")))
    assert wait_observed(executor, handle, Observed.EXITED).exit_code == 0
    assert executor.log_path(handle).read_text() == "direct\n"
