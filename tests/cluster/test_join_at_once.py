"""A rack that boots at once joins whole: three machines run ``gpupool node join`` at the same
moment and all three become schedulable; a ``ray start`` that fails meanwhile (the head too
busy to answer in time) is tried again, and the joiner says so."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.pool import Pool, need_loopback_namespace

NAMES = ("r1", "r2", "r3")


@pytest.fixture
def own_pool(tmp_path: Path) -> Iterator[Pool]:
    need_loopback_namespace()
    pool = Pool.start(tmp_path, env={"GPUPOOL_RAY_HEAD_NODE": "false"})
    try:
        yield pool
    finally:
        pool.stop()


def test_three_machines_joining_at_once_all_become_schedulable(own_pool: Pool) -> None:
    with ThreadPoolExecutor(len(NAMES)) as joins:
        started = [joins.submit(own_pool.join, name, "1xL40S:48GiB", 300) for name in NAMES]
        joined = [join.result() for join in started]
    assert all(node.process.poll() is None for node in joined)
    nodes = Cli(own_pool.server.url, own_pool.server.token).json("nodes")
    schedulable = sorted(n["name"] for n in nodes if n["state"] == "up" and n["schedulable"])
    assert schedulable == sorted(NAMES), nodes
