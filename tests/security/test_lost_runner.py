"""A runner killed with kill -9 takes its workload with it, and its GPUs go to nobody else
before its processes are verifiably gone: after a server restart in between too."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpupool.executors.local import LocalExecutor
from gpupool.executors.remains import Remains
from gpupool.runner.sandbox import members
from tests.security.conftest import Pool
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.waiting import wait_for

HOLD = "import time; print('holding', flush=True); time.sleep(600)"


def sandbox_pids(state: dict) -> list[int]:
    return members(state["sandbox"]["pid_namespace"])


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (one may end while it is looked at)."""
    found = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except psutil.NoSuchProcess:
            pass
    return found


def hold_every_gpu(pool: Pool) -> tuple[dict, dict, dict]:
    """A job holding all 4 GPUs, one waiting for a GPU, and the holder's attempt state."""
    _, client = pool.member("team-a")
    holder = pool.submit(client, [sys.executable, "-c", HOLD], resources={"gpus": 4})
    wait_for(lambda: "holding" in pool.log(holder["id"]), 60, "the holder to run")
    waiter = pool.submit(client, ["true"], resources={"gpus": 1})
    state = wait_for(lambda: pool.state(holder["id"]).get("sandbox") and pool.state(holder["id"]))
    return holder, waiter, state


def test_a_killed_runner_takes_its_workload_and_frees_its_gpus_after(pool: Pool) -> None:
    holder, waiter, state = hold_every_gpu(pool)
    workload = sandbox_pids(state)
    assert alive(workload)

    os.kill(state["runner_pid"], signal.SIGKILL)

    wait_for(lambda: not alive(workload), 10, "the workload to die with its runner")
    lost = pool.wait(holder["id"], {"lost", "failed", "succeeded"})
    assert (lost["status"], lost["reason"]) == ("lost", "RunnerLost")
    started = pool.wait(waiter["id"], {"succeeded", "failed"})
    assert started["status"] == "succeeded"


def test_the_same_after_a_server_restart_in_between(pool: Pool) -> None:
    holder, waiter, state = hold_every_gpu(pool)
    workload = sandbox_pids(state)

    pool.server.kill9()
    os.kill(state["runner_pid"], signal.SIGKILL)
    wait_for(lambda: not alive(workload), 10, "the workload to die with its runner")
    pool.server.start()

    lost = pool.wait(holder["id"], {"lost", "failed", "succeeded"})
    assert (lost["status"], lost["reason"]) == ("lost", "RunnerLost")
    assert pool.wait(waiter["id"], {"succeeded", "failed"})["status"] == "succeeded"
    assert not alive(workload)


class Lingering(Remains):
    """What a dead runner left that will not die yet (a process stuck in the kernel, or
    one this node cannot tell is gone): until ``gone``, the real remains are killed and
    one stand-in PID still reported."""

    def __init__(self) -> None:
        self.gone = False

    def kill(self, record):  # noqa: ANN001, ANN201
        found = super().kill(record)
        return found if self.gone else [*found, 99999999]


@pytest.fixture
def lingering(tmp_path: Path) -> Iterator[tuple[object, object, Lingering]]:
    remains = Lingering()
    settings = make_settings(tmp_path / "data")
    executor = LocalExecutor(settings.jobs_dir, remains=remains, fork_server=False)
    with running_app(settings, executor=executor) as (client, platform):
        yield client, platform, remains


def test_gpus_stay_fenced_while_the_runner_remains_cannot_be_seen_gone(lingering) -> None:  # noqa: ANN001
    client, platform, remains = lingering
    holder = submit(client, [sys.executable, "-c", HOLD], resources={"gpus": 4})
    wait_job(client, holder["id"], {"running"})
    waiter = submit(client, ["true"], resources={"gpus": 1})
    attempt = platform.executor.attempt_dir(holder["id"], 1) / "state.json"
    runner = wait_for(lambda: attempt.exists() and json.loads(attempt.read_text()))
    os.kill(runner["runner_pid"], signal.SIGKILL)

    def fenced() -> dict | None:
        job = client.get(f"/api/v1/jobs/{holder['id']}").json()
        return job if job["reason"] == "GpusFenced" else None

    job = wait_for(fenced, 30, "the holder's GPUs to be fenced")
    assert job["status"] == "running" and "GPUs stay reserved" in job["message"]
    nodes = client.get("/api/v1/nodes").json()
    assert all(gpu["used_share"] == 1 for node in nodes for gpu in node["gpus"])
    assert client.get(f"/api/v1/jobs/{waiter['id']}").json()["status"] == "pending"

    remains.gone = True
    lost = wait_job(client, holder["id"], {"lost"})
    assert lost["reason"] == "RunnerLost"
    assert wait_job(client, waiter["id"])["status"] == "succeeded"
