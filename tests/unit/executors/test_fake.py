"""The fake executors that other parts of gpupool test against."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from gpupool.executors.base import LaunchError
from gpupool.executors.fake import FailingExecutor, NeverStartsExecutor, SlowStartExecutor
from gpupool.executors.task import Observed
from tests.support.tasks import task
from tests.unit.executors.executor_helpers import py, wait_observed


def test_never_starts_stays_starting_until_stopped(tmp_path: Path) -> None:
    executor = NeverStartsExecutor(tmp_path)
    handle = executor.start(task(["true"]))
    assert [executor.poll(handle).observed for _ in range(3)] == [Observed.STARTING] * 3
    assert executor.tasks == [task(["true"])]
    executor.stop(handle, 1.0)
    result = executor.poll(handle)
    assert result.observed == Observed.EXITED
    assert result.exit_code == 128 + signal.SIGTERM


def test_never_starts_can_ignore_stop(tmp_path: Path) -> None:
    executor = NeverStartsExecutor(tmp_path, exits_on_stop=False)
    handle = executor.start(task(["true"]))
    executor.stop(handle, 1.0)
    assert executor.poll(handle).observed == Observed.STARTING
    assert executor.log_path(handle).name == "output.log"


def test_failing_executor_raises_launch_error() -> None:
    executor = FailingExecutor(reason="no_gpu", user_message="no GPU left")
    with pytest.raises(LaunchError) as error:
        executor.start(task(["true"]))
    assert error.value.reason == "no_gpu"
    assert error.value.user_message == "no GPU left"
    assert len(executor.tasks) == 1


def test_slow_start_launches_after_the_delay(jobs_dir: Path) -> None:
    executor = SlowStartExecutor(0.3, jobs_dir)
    handle = executor.start(task(py("raise SystemExit(4)")))
    assert executor.poll(handle).observed == Observed.STARTING
    assert not (jobs_dir / "1" / "attempts" / "1" / "spec.json").exists()

    saved = json.loads(json.dumps(executor.get_state(handle)))
    handle = executor.load_state(saved)

    assert wait_observed(executor, handle, Observed.EXITED).exit_code == 4
    assert executor.log_path(handle) == jobs_dir / "1" / "attempts" / "1" / "output.log"
    executor.release(handle)


def test_slow_start_stop_before_launch(jobs_dir: Path) -> None:
    executor = SlowStartExecutor(60, jobs_dir)
    handle = executor.start(task(py("pass")))
    executor.stop(handle, 1.0)
    result = executor.poll(handle)
    assert result.observed == Observed.EXITED
    assert result.exit_code == 128 + signal.SIGTERM
    assert not (jobs_dir / "1" / "attempts" / "1" / "spec.json").exists()
