"""Metrics ingestion by a real server, and what it costs the scheduling cycle.

A real server (8 declared GPUs) keeps a queue: one job holds every GPU and 200 jobs wait for
one, so each scheduling cycle has work to do. WRITERS jobs (no GPU) each report POINTS points
with ``gpupool.metrics.log`` as fast as they can; their runners check each line and write
the attempts' records files, which the server's ingester reads into the database.

Two runs of the same work, in the same process:

- live: the server ingests while the jobs write (jobs, runners and server share the cores);
- catch-up: the server is killed while the jobs write, then started again: its ingester
  reads the finished records files from its cursors while the scheduler cycles. This is the
  server's own rate, and the cycle's cost of ingestion alone.

Figures: points/s ingested (aim >= 10,000/s per server), and the scheduling cycle's mean time
(the server's own /metrics histogram) while nothing is ingested (the baseline) and while it
ingests, as a ratio.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import httpx
from harness import client, start_server, wait_until
from prometheus_client.parser import text_string_to_metric_families

WRITERS, POINTS = 4, 50_000
PENDING = 200
WINDOW_SECONDS = 6.0
WRITER = (
    "from gpupool import metrics\n"
    f"for step in range({POINTS}):\n"
    "    metrics.log(step=step, loss=1.0 / (step + 1))\n"
)
ENV = {"GPUPOOL_SCHEDULE_INTERVAL_SECONDS": "0.05", "GPUPOOL_EXPLAIN_INTERVAL_SECONDS": "0"}


def cycles(server) -> tuple[float, float]:  # noqa: ANN001
    """The scheduling cycle histogram's (count, sum) so far."""
    headers = {"Authorization": f"Bearer {server.token}"}
    text = httpx.get(f"{server.url}/metrics", headers=headers, timeout=30).text
    found = {}
    for family in text_string_to_metric_families(text):
        if family.name == "gpupool_scheduling_cycle_seconds":
            for sample in family.samples:
                found[sample.name.rsplit("_", 1)[-1]] = sample.value
    return found["count"], found["sum"]


def mean_cycle(server, seconds: float, during=None) -> tuple[float, int]:  # noqa: ANN001
    """The mean cycle time over ``seconds`` (at most, while ``during`` returns True)."""
    count0, sum0 = cycles(server)
    deadline = time.monotonic() + seconds
    while (during() if during else True) and time.monotonic() < deadline:
        time.sleep(0.2)
    count1, sum1 = cycles(server)
    count = int(count1 - count0)
    return (sum1 - sum0) / max(count, 1), count


class Run:
    """One server with its queue, and the writer jobs of one run."""

    def __init__(self) -> None:
        self.server = start_server(ENV)
        self.api = client(self.server)
        hold = self.api.post("/jobs", json={"command": ["sleep", "600"], "resources": {"gpus": 8}})
        self.hold = hold.json()["id"]
        wait_until(lambda: self.job(self.hold)["status"] == "running", 60)
        for _ in range(PENDING):
            self.api.post("/jobs", json={"command": ["true"], "resources": {"gpus": 1}})
        self.ids: list[int] = []

    def job(self, job_id: int) -> dict:
        return self.api.get(f"/jobs/{job_id}").json()

    def write(self) -> None:
        python = os.path.abspath(sys.executable)  # the path the job's sandbox shows
        body = {"command": [python, "-c", WRITER], "priority": 100}  # the head of the queue
        self.ids = [self.api.post("/jobs", json=body).json()["id"] for _ in range(WRITERS)]

    def kept(self) -> int:
        """Points in the database, read beside the server (an API read of them would load
        the server as much as the ingestion): the highest row id, as only these jobs report."""
        database = self.server.data_dir / "gpupool.db"
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as connection:
            return connection.execute("SELECT coalesce(max(id), 0) FROM job_metrics").fetchone()[0]

    def ingest(self) -> tuple[float, float, int]:
        """Points/s from the first point kept to the last, and the cycle meanwhile."""
        total = WRITERS * POINTS
        wait_until(lambda: self.kept() > 0, 120, every=0.1)
        began = time.monotonic()
        cycle, count = mean_cycle(self.server, 300.0, during=lambda: self.kept() < total)
        return self.kept() / (time.monotonic() - began), cycle, count

    def restart_after_jobs_wrote(self) -> None:
        """Kill the server (its jobs go on), let the writers end, start it again."""
        wait_until(lambda: all(self.job(i)["status"] == "running" for i in self.ids), 120)
        self.api.close()
        self.server.kill9()  # its jobs go on
        jobs = self.server.data_dir / "jobs"
        wait_until(lambda: all(_ended(jobs / str(i)) for i in self.ids), 120)
        self.server.start()
        self.api = client(self.server)

    def close(self) -> None:
        self.api.close()
        self.server.stop()


def _ended(job_dir: Path) -> bool:
    try:
        return "exit_code" in json.loads((job_dir / "attempts" / "1" / "state.json").read_text())
    except (OSError, ValueError):
        return False


def measure(label: str, catch_up: bool) -> None:
    run = Run()
    try:
        run.write()
        if catch_up:
            run.restart_after_jobs_wrote()
        rate, busy, busy_count = run.ingest()
        idle, idle_count = mean_cycle(run.server, WINDOW_SECONDS)
    finally:
        run.close()
    print(
        f"  {label:<9} {rate:9,.0f} points/s   cycle {idle * 1000:6.2f} ms idle ({idle_count})",
        end="",
    )
    print(f"  {busy * 1000:6.2f} ms ingesting ({busy_count})   ratio {busy / idle:5.2f}x")


def main() -> None:
    print(
        f"Metrics ingestion: {WRITERS} jobs x {POINTS:,} points (gpupool.metrics.log), "
        f"a queue of {PENDING} jobs; aim >= 10,000 points/s; cycle ratio 1.00: no cost"
    )
    measure("live", catch_up=False)
    measure("catch-up", catch_up=True)


if __name__ == "__main__":
    sys.exit(main())
