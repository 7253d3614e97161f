"""Workloads that tests of several tiers run: their programs and what they print."""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil

from gpupool.proxy import client_via

# Attempt 1 prints five lines, then runs until SIGTERM, which it answers with a last line;
# attempt 2 prints twelve lines (more bytes than attempt 1: an offset carried over from
# attempt 1 would skip the start of attempt 2's log) and ends.
TWO_ATTEMPTS = """
import os, signal, sys, time
if os.environ["GPUPOOL_ATTEMPT"] == "1":
    def stop(signum, frame):
        print("attempt 1 got SIGTERM", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    for i in range(1, 6):
        print(f"attempt 1 says line {i}", flush=True)
    while True:
        time.sleep(0.1)
for i in range(1, 13):
    print(f"attempt 2 says line {i}", flush=True)
"""
FIRST = "".join(f"attempt 1 says line {i}\n" for i in range(1, 6))
SECOND = "".join(f"attempt 2 says line {i}\n" for i in range(1, 13))
ANNOUNCEMENT = "--- attempt 2 started (requeued after preemption) ---"


def runner_client(data_dir: Path, job_id: int, timeout: float = 10.0) -> httpx.Client:
    """An HTTP client of a serving job's running attempt through its runner's socket: the
    only way to a workload on a network of its own (the platform's, and the root's here)."""
    attempts = data_dir / "jobs" / str(job_id) / "attempts"
    latest = max(attempts.iterdir(), key=lambda p: int(p.name))
    return client_via(str(latest / "listen.sock"), timeout)


def node_listeners(pids: set[int], port: int) -> list[int]:
    """Which of ``pids`` listen on TCP ``port`` in the caller's (the node's) network
    namespace: a workload on a network of its own holds none, whatever else of the
    machine may hold that port (asking the port itself would prove nothing)."""
    return [
        conn.pid
        for conn in psutil.net_connections("tcp")
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid in pids
    ]
