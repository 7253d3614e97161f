"""Shared pieces of the benchmarks: a real server subprocess, a client, percentiles."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.server import ServerProcess  # noqa: E402

from gpupool.cluster.rayenv import only_loopback  # noqa: E402

FINAL = {"succeeded", "failed", "cancelled", "lost"}
EIGHT_GPUS = "8xA100-SXM4-80GB:80GiB"


def in_loopback_namespace() -> None:
    """Run this script again inside a network namespace holding only loopback (as root, with
    scripts/loopback-only) unless it runs in one: Ray's nodes on one machine keep to
    127.0.0.1 only there. Returns only inside such a namespace."""
    if only_loopback():
        return
    if os.geteuid() != 0:
        sys.exit("run as root: the pool needs a network namespace holding only loopback")
    if os.environ.get("GPUPOOL_LOOPBACK_ONLY") == "1":  # set by scripts/loopback-only: no loop
        sys.exit("no network namespace holding only loopback could be made (unshare --net)")
    script = str(ROOT / "scripts" / "loopback-only")
    os.execv(script, [script, sys.executable, *sys.argv])


def stop_on_sigterm() -> None:
    """SIGTERM ends the benchmark through its ``finally`` blocks, so that the servers, Ray
    nodes and jobs it started are stopped too."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def scratch(prefix: str, where: str | None = None) -> Path:
    """A new directory for this run, removed when the benchmark exits (SIGTERM included,
    through ``stop_on_sigterm``): a server's data directory holds its jobs, environments and
    images, and a few runs left behind would fill the disk."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    atexit.register(shutil.rmtree, path, True)
    return path


def shared_workdir() -> str:
    """A working directory every job's account can read (jobs run under their owner's
    account when the server is root)."""
    path = scratch("gpupool-bench-work-", "/tmp")
    path.chmod(0o755)
    return str(path)


def start_server(env: dict[str, str] | None = None) -> ServerProcess:
    data = scratch("gpupool-bench-") / "data"
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


class TreeCpu:
    """CPU seconds used by this process and everything it starts (the server, its fork
    server, runners, sandboxes, pasta), from a cgroup of its own: on a busy machine this moves
    far less than wall time does. Needs root and a cpuacct (v1) or cpu (v2) hierarchy;
    ``seconds()`` is None where there is neither."""

    def __init__(self) -> None:
        self.stat: str | None = None
        for directory, name in (
            ("/sys/fs/cgroup/cpuacct", "cpuacct.usage"),
            ("/sys/fs/cgroup", "cpu.stat"),
        ):
            own = os.path.join(directory, f"gpupool-bench-{os.getpid()}")
            try:
                os.makedirs(own, exist_ok=True)
                with open(os.path.join(own, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                continue
            self.stat = os.path.join(own, name)
            atexit.register(_leave, directory, own)
            return

    def seconds(self) -> float | None:
        if self.stat is None:
            return None
        with open(self.stat) as f:
            text = f.read()
        if self.stat.endswith("cpuacct.usage"):
            return int(text) / 1e9
        fields = dict(line.split() for line in text.splitlines())
        return int(fields["usage_usec"]) / 1e6


def _leave(parent: str, own: str) -> None:
    """Back to the parent cgroup, and the benchmark's own removed (once its children ended)."""
    try:
        with open(os.path.join(parent, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        os.rmdir(own)
    except OSError:
        pass
