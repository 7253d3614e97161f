"""Shared pieces of the benchmarks: a real server subprocess, a client, percentiles."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.server import ServerProcess  # noqa: E402

FINAL = {"succeeded", "failed", "cancelled", "lost"}
EIGHT_GPUS = "8xA100-SXM4-80GB:80GiB"


def start_server(env: dict[str, str] | None = None) -> ServerProcess:
    data = Path(tempfile.mkdtemp(prefix="gpupool-bench-")) / "data"
    return ServerProcess(data, gpus=EIGHT_GPUS, env=env).start()


def client(server: ServerProcess) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"p50 {percentile(ms, 50):7.1f} ms   p95 {percentile(ms, 95):7.1f} ms   "
        f"mean {statistics.fmean(ms):7.1f} ms   (n={len(ms)})"
    )


def wait_until(check: Callable[[], bool], timeout: float, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not met in time")
        time.sleep(every)
