"""What the executor tells a gang's task of the node's fence (``executors.fence``)."""

from __future__ import annotations

from pathlib import Path

from gpupool.executors.fence import RAY_WORKER_PORTS, fence_spec
from gpupool.executors.gang import planned
from gpupool.runner.wire import FencePolicy
from gpupool.settings import Settings
from tests.support.tasks import task


def test_a_gang_task_is_told_its_fence_and_a_single_node_task_none(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, port=8321)
    tasks = [
        task(
            node=f"n{i}",
            task_index=i,
            task_count=2,
            node_address=f"10.0.0.{i + 1}",
        )
        for i in range(2)
    ]
    head, other = planned(tasks, 29500)
    spec = fence_spec(head, settings, "/usr/sbin/nft")
    assert spec is not None
    assert spec["rendezvous"] == [29500] and spec["peers"] == ["10.0.0.1", "10.0.0.2"]
    assert spec["open_ports"] == [8321] and spec["closed_ranges"] == [list(RAY_WORKER_PORTS)]
    assert 0 in spec["platform_uids"] and spec["dir"] == str(tmp_path / "jobs" / ".fence")
    FencePolicy(spec)  # what the runner accepts
    assert fence_spec(other, settings, None)["rendezvous"] == []  # type: ignore[index]
    assert fence_spec(task(job_id=2, node="n0"), settings, None) is None
