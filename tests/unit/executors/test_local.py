"""LocalExecutor against real runners and real workloads: launching, stopping, recovering, a
code snapshot unpacked once per job, a task that listens, and runners launched through the fork
server."""

from __future__ import annotations

import json
import os
import signal
import tarfile
from pathlib import Path

import pytest

from gpupool.executors.base import LaunchError
from gpupool.executors.local import LocalExecutor
from gpupool.executors.remains import Remains
from gpupool.executors.task import Observed
from tests.support.code import archive, ref, regular, special
from tests.support.tasks import task
from tests.unit.executors.executor_helpers import (
    is_alive,
    py,
    wait_for,
    wait_observed,
    wait_until_file,
)

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


# -- a code snapshot in the job --------------------------------------------------------------------


# The local executor runs a job with a code snapshot in it: unpacked once under the job's
# directory, shared by its attempts, refused with a clear launch error when it cannot be.

# each attempt adds its number to a file of its working directory, then shows what is there
APPEND = (
    "import os; open('seen.txt', 'a').write(os.environ['GPUPOOL_ATTEMPT']); "
    "print(open('seen.txt').read(), sorted(os.listdir('.')))"
)


def code_task(tmp_path: Path, data: bytes, attempt: int = 1, command: list[str] | None = None):  # noqa: ANN201
    path = tmp_path / "store" / "code.tar.gz"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return task(command or py(APPEND), 7, attempt, code=ref(data), code_archive=str(path))


def test_attempts_share_the_unpacked_code(
    executor: LocalExecutor, jobs_dir: Path, tmp_path: Path
) -> None:
    data = archive(regular("train.py", b"print('hi')\n"))
    for attempt, seen in ((1, "1"), (2, "12")):
        handle = executor.start(code_task(tmp_path, data, attempt))
        assert wait_observed(executor, handle, Observed.EXITED).exit_code == 0
        log = executor.log_path(handle).read_text()
        assert log == f"{seen} ['seen.txt', 'train.py']\n"
        executor.release(handle)
    assert (jobs_dir / "7" / "code" / "train.py").read_text() == "print('hi')\n"


def test_a_missing_archive_is_a_launch_error_saying_so(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    job = code_task(tmp_path, archive(regular("a")))
    Path(job.code_archive).unlink()
    with pytest.raises(LaunchError) as failed:
        executor.start(job)
    assert failed.value.reason == "code_missing"
    assert "missing from the server's storage" in failed.value.user_message


def test_an_archive_that_cannot_be_unpacked_fails_the_launch(
    executor: LocalExecutor, jobs_dir: Path, tmp_path: Path
) -> None:
    data = archive(regular("a"), special("link", tarfile.SYMTYPE, "/etc/passwd"))
    with pytest.raises(LaunchError) as failed:
        executor.start(code_task(tmp_path, data))
    assert failed.value.reason == "code_unpack_failed"
    assert "member 'link'" in failed.value.user_message
    assert not (jobs_dir / "7" / "code").exists()


# -- a task that listens ---------------------------------------------------------------------------


# A task that listens gets a free port on the executor's address, in PORT and
# GPUPOOL_LISTEN_HOST (gpupool's value over the job's own PORT), kept in its handle's state
# through get_state/load_state and found again by ``recover`` after a crash.

PRINT = "import os; print(os.environ['GPUPOOL_LISTEN_HOST'], os.environ['PORT'])"


def test_a_task_that_listens_is_given_a_port_it_keeps(
    executor: LocalExecutor, jobs_dir: Path
) -> None:
    handle = executor.start(task(py(PRINT), listen=True, env={"PORT": "1"}))
    assert handle.state["host"] == "127.0.0.1" and 0 < handle.state["port"] < 65536
    wait_observed(executor, handle, Observed.EXITED)
    assert executor.log_path(handle).read_text().split() == ["127.0.0.1", str(handle.state["port"])]
    again = executor.load_state(executor.get_state(handle))
    assert (again.state["host"], again.state["port"]) == ("127.0.0.1", handle.state["port"])
    found = LocalExecutor(jobs_dir).recover(handle.job_id, handle.attempt)
    assert found is not None
    assert (found.state["host"], found.state["port"]) == ("127.0.0.1", handle.state["port"])


def test_a_pools_node_binds_the_address_the_pool_has_for_it(jobs_dir: Path) -> None:
    executor = LocalExecutor(jobs_dir, listen_host=None)
    handle = executor.start(task(py(PRINT), listen=True, node_address="127.0.0.2"))
    assert handle.state["host"] == "127.0.0.2"
    wait_observed(executor, handle, Observed.EXITED)
    assert executor.log_path(handle).read_text().split()[0] == "127.0.0.2"


def test_a_task_that_does_not_listen_gets_no_port(executor: LocalExecutor) -> None:
    code = "import os; print('PORT' in os.environ, 'GPUPOOL_LISTEN_HOST' in os.environ)"
    handle = executor.start(task(py(code)))
    assert "port" not in handle.state
    wait_observed(executor, handle, Observed.EXITED)
    assert executor.log_path(handle).read_text().split() == ["False", "False"]


# -- runners launched through the fork server: same behaviour, and it may die without harm ---------


def test_runners_come_from_the_fork_server_in_their_own_session(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "jobs")
    handle = executor.start(task(py(SLEEP_READY)))
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
    first = executor.start(task(py(SLEEP_READY), job_id=1))
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
    handle = executor.start(task(py(SLEEP_READY)))
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
