"""LocalExecutor against real runners and real workloads."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from executor_helpers import is_alive, py, wait_for, wait_observed, wait_until_file
from tests.support.tasks import task

from gpupool.executors.base import LaunchError
from gpupool.executors.local import LocalExecutor
from gpupool.executors.remains import Remains
from gpupool.executors.task import Observed

SLEEP_READY = "import time; print('ready', flush=True); time.sleep(600)"
IGNORES_SIGTERM = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def wait_ready(executor: LocalExecutor, handle) -> None:
    log = executor.log_path(handle)
    wait_for(lambda: log.exists() and "ready" in log.read_text(), what="the workload")


def test_start_poll_exit_and_log(executor: LocalExecutor, jobs_dir: Path) -> None:
    code = "import sys; print('hello', flush=True); print('oops', file=sys.stderr); sys.exit(3)"
    handle = executor.start(task(py(code), job_id=5, attempt=2))

    result = wait_observed(executor, handle, Observed.EXITED)

    assert result.exit_code == 3
    assert result.started_at is not None
    assert result.ended_at >= result.started_at
    attempt_dir = jobs_dir / "5" / "attempts" / "2"
    assert executor.log_path(handle) == attempt_dir / "output.log"
    assert executor.log_path(handle).read_text() == "hello\noops\n"
    assert (jobs_dir / "5" / "checkpoints").is_dir()
    assert (jobs_dir / "5" / "outputs").is_dir()
    spec = json.loads((attempt_dir / "spec.json").read_text())
    assert spec["command"] == py(code)
    executor.release(handle)


def test_starting_then_running_then_exited(executor: LocalExecutor, tmp_path: Path) -> None:
    release = tmp_path / "release"
    handle = executor.start(task(wait_until_file(release)))
    assert executor.poll(handle).observed in (Observed.STARTING, Observed.RUNNING)

    running = wait_observed(executor, handle, Observed.RUNNING)
    assert running.started_at is not None
    release.write_text("0")

    assert wait_observed(executor, handle, Observed.EXITED).exit_code == 0
    executor.release(handle)


def test_environment_gpus_and_base_env(jobs_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUPOOL_TEST_SERVER_SECRET", "s3cret")
    executor = LocalExecutor(jobs_dir)
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    handle = executor.start(task(py(dump), env={"MINE": "1"}, gpu_uuids=["GPU-7"]))

    wait_observed(executor, handle, Observed.EXITED)

    env = json.loads(executor.log_path(handle).read_text())
    assert env["MINE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-7"
    assert env["PATH"] == os.environ["PATH"]
    assert "GPUPOOL_TEST_SERVER_SECRET" not in env


def test_explicit_base_env(jobs_dir: Path) -> None:
    executor = LocalExecutor(jobs_dir, base_env={"PATH": "/usr/bin:/bin", "BASE": "b"})
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    handle = executor.start(task(py(dump), env={"BASE": "user wins"}))
    wait_observed(executor, handle, Observed.EXITED)
    env = json.loads(executor.log_path(handle).read_text())
    assert env["PATH"] == "/usr/bin:/bin"
    assert env["BASE"] == "user wins"


def test_stop_sends_sigterm(executor: LocalExecutor) -> None:
    handle = executor.start(task(py(SLEEP_READY)))
    wait_ready(executor, handle)

    executor.stop(handle, 5.0)

    result = wait_observed(executor, handle, Observed.EXITED)
    assert result.exit_code == 128 + signal.SIGTERM
    executor.stop(handle, 5.0)  # idempotent once ended
    executor.release(handle)
    executor.stop(handle, 5.0)  # and after release


def test_stop_grace_then_sigkill(executor: LocalExecutor) -> None:
    handle = executor.start(task(py(IGNORES_SIGTERM), stop_grace_seconds=600))
    wait_ready(executor, handle)

    executor.stop(handle, 0.5)  # the grace given to stop() wins over the task's
    executor.stop(handle, 0.5)  # asking twice is harmless

    result = wait_observed(executor, handle, Observed.EXITED)
    assert result.exit_code == 128 + signal.SIGKILL
    assert result.message == f"killed by signal {signal.SIGKILL}"


def test_stop_right_after_start(executor: LocalExecutor) -> None:
    handle = executor.start(task(py(SLEEP_READY)))
    executor.stop(handle, 5.0)
    result = wait_observed(executor, handle, Observed.EXITED)
    assert result.exit_code == 128 + signal.SIGTERM


def test_state_round_trip_to_a_new_executor(jobs_dir: Path, tmp_path: Path) -> None:
    first = LocalExecutor(jobs_dir)
    release = tmp_path / "release"
    handle = first.start(task(wait_until_file(release), job_id=9))
    wait_observed(first, handle, Observed.RUNNING)

    saved = json.dumps(first.get_state(handle))
    second = LocalExecutor(jobs_dir)  # as after a server restart
    adopted = second.load_state(json.loads(saved))

    assert second.poll(adopted).observed == Observed.RUNNING
    assert second.log_path(adopted) == first.log_path(handle)
    release.write_text("5")
    assert wait_observed(second, adopted, Observed.EXITED).exit_code == 5
    first.release(handle)
    second.release(adopted)


def test_stop_through_a_new_executor(jobs_dir: Path) -> None:
    first = LocalExecutor(jobs_dir)
    handle = first.start(task(py(SLEEP_READY)))
    wait_ready(first, handle)

    second = LocalExecutor(jobs_dir)
    adopted = second.load_state(json.loads(json.dumps(first.get_state(handle))))
    second.stop(adopted, 5.0)

    assert wait_observed(second, adopted, Observed.EXITED).exit_code == 128 + signal.SIGTERM
    first.release(handle)


def test_killed_runner_is_lost_only_once_its_workload_is_gone(executor: LocalExecutor) -> None:
    handle = executor.start(task(py(SLEEP_READY)))
    wait_ready(executor, handle)
    state_file = Path(handle.state["attempt_dir"]) / "state.json"
    workload = json.loads(state_file.read_text())["pid"]

    os.kill(handle.state["runner_pid"], signal.SIGKILL)

    lost = wait_observed(executor, handle, Observed.LOST)
    assert lost.message
    assert not is_alive(workload), "lost (its GPUs free) while its workload still ran"
    executor.stop(handle, 1.0)  # idempotent on what is gone
    assert executor.poll(handle).observed == Observed.LOST


class Lingering(Remains):
    """Remains that are still there until ``gone`` is set (a process stuck in the kernel)."""

    def __init__(self) -> None:
        self.gone = False
        self.killed = 0

    def kill(self, record):  # noqa: ANN001, ANN201
        self.killed += 1
        return [] if self.gone else [4242]


def test_a_runner_whose_processes_linger_keeps_its_gpus_until_they_go(jobs_dir: Path) -> None:
    remains = Lingering()
    executor = LocalExecutor(jobs_dir, remains=remains)
    handle = executor.start(task(py(SLEEP_READY)))
    wait_ready(executor, handle)
    os.kill(handle.state["runner_pid"], signal.SIGKILL)

    fenced = wait_observed(executor, handle, Observed.ORPHANED)
    assert "GPUs stay reserved" in fenced.message
    assert executor.poll(handle).observed == Observed.ORPHANED
    assert remains.killed >= 2  # killed again at every look

    remains.gone = True
    assert executor.poll(handle).observed == Observed.LOST
    executor.release(handle)


def test_lost_seen_by_a_new_executor(jobs_dir: Path) -> None:
    first = LocalExecutor(jobs_dir)
    handle = first.start(task(py(SLEEP_READY)))
    wait_ready(first, handle)
    os.kill(handle.state["runner_pid"], signal.SIGKILL)
    wait_observed(first, handle, Observed.LOST)  # reaps the runner

    second = LocalExecutor(jobs_dir)
    adopted = second.load_state(first.get_state(handle))
    assert second.poll(adopted).observed == Observed.LOST


def test_start_twice_raises(executor: LocalExecutor) -> None:
    handle = executor.start(task(py("pass"), job_id=3, attempt=1))
    with pytest.raises(LaunchError) as immediately:
        executor.start(task(py("pass"), job_id=3, attempt=1))
    assert immediately.value.reason == "already_started"

    wait_observed(executor, handle, Observed.EXITED)
    with pytest.raises(LaunchError):
        LocalExecutor(executor.jobs_dir).start(task(py("pass"), job_id=3, attempt=1))
    # The next attempt of the same job is a new directory.
    other = executor.start(task(py("pass"), job_id=3, attempt=2))
    assert wait_observed(executor, other, Observed.EXITED).exit_code == 0


def test_started_file_blocks_a_launch(executor: LocalExecutor, jobs_dir: Path) -> None:
    attempt_dir = jobs_dir / "4" / "attempts" / "1"
    attempt_dir.mkdir(parents=True)
    (attempt_dir / "started").touch()
    with pytest.raises(LaunchError) as error:
        executor.start(task(py("pass"), job_id=4))
    assert error.value.reason == "already_started"
    assert not (attempt_dir / "spec.json").exists()


def test_invalid_task_raises(executor: LocalExecutor) -> None:
    with pytest.raises(LaunchError) as error:
        executor.start(task([]))
    assert error.value.reason == "invalid_task"


def test_missing_python_raises_and_allows_a_retry(jobs_dir: Path) -> None:
    broken = LocalExecutor(jobs_dir, python="/nonexistent/python3")
    with pytest.raises(LaunchError) as error:
        broken.start(task(py("pass")))
    assert error.value.reason == "spawn_failed"
    executor = LocalExecutor(jobs_dir)
    handle = executor.start(task(py("pass")))
    assert wait_observed(executor, handle, Observed.EXITED).exit_code == 0


def test_missing_command_exits_127(executor: LocalExecutor) -> None:
    handle = executor.start(task(["/nonexistent/gpupool-command"]))
    result = wait_observed(executor, handle, Observed.EXITED)
    assert result.exit_code == 127
    assert "command not found" in result.message


def test_release_reaps_the_runner(executor: LocalExecutor) -> None:
    handle = executor.start(task(py("pass")))
    wait_observed(executor, handle, Observed.EXITED)
    runner_pid = handle.state["runner_pid"]
    executor.release(handle)
    wait_for(lambda: not is_alive(runner_pid), what="the runner to be reaped")
    with pytest.raises(ChildProcessError):
        os.waitpid(runner_pid, os.WNOHANG)
