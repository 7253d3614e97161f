"""A pool of Ray nodes on this machine: how fast a node joins, and how fast a job starts on a
joined node, against a one-machine server in the same run (the baseline).

- join: `gpupool node join` from its start to the server scheduling on the node (what the
  command prints), for three nodes joined one after the other;
- start: submit -> the job's attempt started (the server's own started_at - submitted_at),
  for JOBS one-GPU jobs run one at a time on a joined node, and the same on one machine.

Ray keeps to 127.0.0.1 only in a network namespace holding only loopback: as root this
script runs itself in one (scripts/loopback-only).

    .venv/bin/python benchmarks/pool_start.py [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from harness import FINAL, client, start_server, summary, wait_until
from tests.support.pool import Pool, only_loopback

JOBS = 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=JOBS)
    args = parser.parse_args()
    if not only_loopback():
        if os.geteuid() != 0:
            sys.exit("run as root: the pool needs a network namespace holding only loopback")
        root = Path(__file__).resolve().parents[1]
        os.execv(
            str(root / "scripts" / "loopback-only"),
            [str(root / "scripts" / "loopback-only"), sys.executable, *sys.argv],
        )
    baseline = one_machine(args.jobs)
    joins, pooled = pool(args.jobs)
    print(f"node join -> schedulable: {', '.join(f'{s:.1f} s' for s in joins)}")
    print(f"submit -> started, one machine (baseline): {summary(baseline)}")
    print(f"submit -> started, on a joined Ray node:   {summary(pooled)}")
    ratio = sorted(pooled)[len(pooled) // 2] / sorted(baseline)[len(baseline) // 2]
    print(f"ratio of medians (pool / one machine): {ratio:.2f}")


def one_machine(jobs: int) -> list[float]:
    server = start_server()
    try:
        return starts(server, jobs)
    finally:
        server.stop()


def pool(jobs: int) -> tuple[list[float], list[float]]:
    started = Pool.start(Path(tempfile.mkdtemp(prefix="gpupool-bench-pool-")))
    try:
        joined = [started.join(f"n{i}", "4xH100-SXM5-80GB:80GiB") for i in (1, 2, 3)]
        return [node.seconds or 0.0 for node in joined], starts(started.server, jobs, "H100")
    finally:
        started.stop()


def starts(server, jobs: int, gpu_type: str | None = None) -> list[float]:  # noqa: ANN001
    """submit -> started of ``jobs`` one-GPU jobs, one after the other."""
    seconds = []
    with client(server) as api:
        for _ in range(jobs):
            spec = {"command": ["true"], "resources": {"gpus": 1}, "workdir": "/tmp"}
            if gpu_type:
                spec["gpu_types"] = [gpu_type]
            job_id = api.post("/jobs", json=spec).json()["id"]
            wait_until(lambda j=job_id: api.get(f"/jobs/{j}").json()["status"] in FINAL, 60)
            job = api.get(f"/jobs/{job_id}").json()
            seconds.append(job["started_at"] - job["submitted_at"])
    return seconds


if __name__ == "__main__":
    main()
