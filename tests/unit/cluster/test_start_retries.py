"""A Ray node whose start fails is started again, waiting longer each time with jitter, up to
a bound: real processes stand for ``ray start`` (the first starts fail as Ray's do when the
head is too busy to answer in time)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpupool.cluster.process import READY_LINE, RayProcess, RayStartError, start_node

FLAKY = """
import pathlib, sys, time
tries = pathlib.Path(sys.argv[1])
failures = int(sys.argv[2])
count = int(tries.read_text()) if tries.exists() else 0
tries.write_text(str(count + 1))
if count < failures:
    print("Failed to get node info b'RPC error: Deadline Exceeded'", flush=True)
    sys.exit(1)
print("READY", flush=True)
time.sleep(60)
""".replace("READY", READY_LINE)


def flaky_node(tmp_path: Path, failures: int) -> RayProcess:
    node = RayProcess([], {}, tmp_path / "node.log")
    node.argv = [sys.executable, "-c", FLAKY, str(tmp_path / "tries"), str(failures)]
    return node


def test_a_node_that_fails_twice_starts_at_the_third_try(tmp_path: Path) -> None:
    said: list[str] = []
    waits: list[float] = []
    node = start_node(flaky_node(tmp_path, 2), 6, said.append, waits.append, lambda a, b: b)
    try:
        assert node.alive()
        assert (tmp_path / "tries").read_text() == "3"
        assert waits == [1.5, 3.0], "doubled, times the jitter's factor (here its largest)"
        assert "RPC error: Deadline Exceeded" in said[0] and "try 2 of 6" in said[0]
        assert "try 3 of 6" in said[1]
    finally:
        node.stop()


def test_the_last_failure_is_raised_after_the_bound(tmp_path: Path) -> None:
    said: list[str] = []
    with pytest.raises(RayStartError, match="did not start in 3 tries: .*Deadline Exceeded"):
        start_node(flaky_node(tmp_path, 5), 3, said.append, lambda _s: None, lambda a, b: a)
    assert (tmp_path / "tries").read_text() == "3"
    assert len(said) == 2
