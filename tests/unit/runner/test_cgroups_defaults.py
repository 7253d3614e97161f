"""The limits every attempt's spec carries when its job asks for none: the node's default
memory (an admin's, else the node's memory over its GPUs) and the node's task limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from tests.support.tasks import task

from gpupool.domain.inventory import GpuDevice, NodeInventory
from gpupool.executors.isolation import Isolation
from gpupool.runner.wire import RunnerSpec
from gpupool.settings import Settings

GIB = 1024**3


def node(gpus: int) -> NodeInventory:
    found = [
        GpuDevice(index=i, uuid=f"GPU-{i}", name="A100", memory_bytes=80 * GIB) for i in range(gpus)
    ]
    return NodeInventory(name="n", cpus=8, memory_bytes=64 * GIB, gpus=found)


def limits(tmp_path: Path, gpus: int, **settings: object) -> dict[str, object]:
    isolation = Isolation(Settings(data_dir=tmp_path / "data", **settings))
    isolation.devices.update(node(gpus))
    return isolation.limits(task(user="ann"))


def test_the_default_memory_is_the_nodes_over_its_gpus(tmp_path: Path) -> None:
    assert limits(tmp_path, 4) == {"cpus": None, "memory_bytes": 16 * GIB, "pids_max": 4096}
    assert limits(tmp_path, 0)["memory_bytes"] == 64 * GIB  # no GPU: divided by 1


def test_an_admin_sets_the_default_memory_and_the_task_limit(tmp_path: Path) -> None:
    found = limits(tmp_path, 4, job_default_memory="8GiB", job_pids_max=512)
    assert (found["memory_bytes"], found["pids_max"]) == (8 * GIB, 512)


def test_a_job_that_asks_keeps_its_memory(tmp_path: Path) -> None:
    isolation = Isolation(Settings(data_dir=tmp_path / "data"))
    assert isolation.limits(task(user="ann", memory_bytes=3 * GIB))["memory_bytes"] == 3 * GIB


def test_a_default_memory_that_is_no_quantity_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="write it like 20GiB"):
        Settings(data_dir=tmp_path / "data", job_default_memory="lots")


def test_an_older_spec_without_a_task_limit_is_still_valid() -> None:
    raw = {
        "version": 1,
        "job_id": 1,
        "attempt": 1,
        "command": ["true"],
        "log_limit_bytes": 1,
        "stop_grace_seconds": 1,
        "checkpoint_dir": "/c",
        "output_dir": "/o",
        "limits": {"memory_bytes": GIB},
    }
    assert RunnerSpec(raw).pids_max is None
    assert RunnerSpec(raw | {"limits": {"pids_max": 64}}).pids_max == 64


def test_a_job_that_asks_keeps_its_task_limit_under_the_nodes(tmp_path: Path) -> None:
    isolation = Isolation(Settings(data_dir=tmp_path / "data", job_pids_max=512))
    assert isolation.limits(task(user="ann", pids=64))["pids_max"] == 64
    # never above the node's
    assert isolation.limits(task(user="ann", pids=4096))["pids_max"] == 512
