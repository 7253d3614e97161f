"""A task that listens gets a free port on the executor's address, in PORT and
GPUPOOL_LISTEN_HOST (gpupool's value over the job's own PORT), kept in its handle's state
through get_state/load_state and found again by ``recover`` after a crash."""

from __future__ import annotations

from pathlib import Path

from executor_helpers import py, wait_observed
from tests.support.tasks import task

from gpupool.executors.local import LocalExecutor
from gpupool.executors.task import Observed

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
