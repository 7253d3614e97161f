"""A start on a pool's node waits for the node as long as its image's unpack may take (the
node unpacks an image the first time one of its jobs needs it, within the start), where a
plain start waits a minute: a big image's first job is not given up on while its node
unpacks it, then started there unknown to the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupool.cluster.executor import IMAGE_START_TIMEOUT_S, START_TIMEOUT_S, RayExecutor
from gpupool.executors import images
from gpupool.executors.task import TaskSpec


class Cluster:
    """Stands for the bridge: answers each start, noting how long the server would wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def call(self, node: str, method: str, timeout: float = 30.0, **args: Any) -> Any:
        assert method == "start"
        self.waits.append(timeout)
        return {"state": {"pid": 1}}


def task(job_id: int, **fields: Any) -> TaskSpec:
    return TaskSpec(
        job_id=job_id,
        attempt=1,
        node="n1",
        command=["true"],
        env={},
        workdir=None,
        gpu_uuids=[],
        log_limit_bytes=1024,
        stop_grace_seconds=1.0,
        **fields,
    )


def test_a_start_with_an_image_waits_as_long_as_an_unpack_may_take(tmp_path: Path) -> None:
    cluster = Cluster()
    executor = RayExecutor(cluster, tmp_path / "jobs")  # type: ignore[arg-type]
    image = {"digest": "sha256:" + "a" * 64, "layout": str(tmp_path / "oci" / "a")}
    executor.start(task(1))
    executor.start(task(2, image=image))

    assert cluster.waits == [START_TIMEOUT_S, IMAGE_START_TIMEOUT_S]
    assert IMAGE_START_TIMEOUT_S >= images.UNPACK_TIMEOUT_S
