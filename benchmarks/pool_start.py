"""A pool of Ray nodes on this machine: how fast a node joins, and how fast a job starts on
joined nodes, against a one-machine server in the same run (the baseline).

- join: `gpupool node join` from its start to the server scheduling on the node (what the
  command prints), for three nodes joined one after the other;
- start: JOBS one-GPU jobs run one at a time on one machine and on a joined node, and
  GANG_JOBS jobs over two joined nodes (`"nodes": 2`, one GPU each), one at a time. Two
  figures each: the server's own started_at - submitted_at (for a job over several nodes
  that is its earliest task's start), and "all ranks started": the last task's own clock
  at its first instruction - submitted_at (each task runs `date +%s.%N`, read back from
  the job's log: the server records no start per task).

Ray keeps to 127.0.0.1 only in a network namespace holding only loopback: as root this
script runs itself in one (scripts/loopback-only).

    .venv/bin/python benchmarks/pool_start.py [--jobs N] [--gang-jobs N]
"""

from __future__ import annotations

import argparse
import re
import statistics
from dataclasses import dataclass, field

from harness import (
    FINAL,
    client,
    in_loopback_namespace,
    scratch,
    shared_workdir,
    start_server,
    stop_on_sigterm,
    summary,
    wait_until,
)
from tests.support.pool import Pool

JOBS, GANG_JOBS = 20, 10
CLOCK = [
    "sh",
    "-c",
    "date +%s.%N",
]  # a task's own clock when it starts (wall time, as the server's)
CLOCK_LINE = re.compile(r"(\d{9,}\.\d+)\s*$", re.MULTILINE)
RAY_JOBS = "Ray Jobs, submit -> start on these machines: 2.1-2.4 s (aim: under 1 s)"


@dataclass
class Starts:
    """Seconds from submit: to the server's started_at, and to the last task's own start."""

    first: list[float] = field(default_factory=list)
    all_ranks: list[float] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--gang-jobs", type=int, default=GANG_JOBS)
    args = parser.parse_args()
    in_loopback_namespace()
    stop_on_sigterm()
    workdir = shared_workdir()
    baseline = one_machine(args.jobs, workdir)
    joins, single, gang = pool(args.jobs, args.gang_jobs, workdir)
    print(f"node join -> schedulable: {', '.join(f'{s:.1f} s' for s in joins)}")
    report(
        "submit -> started (server's started_at; several nodes: the first task)",
        "first",
        baseline,
        single,
        gang,
    )
    report(
        "submit -> all ranks started (the last task's own clock)",
        "all_ranks",
        baseline,
        single,
        gang,
    )
    print(f"reference: {RAY_JOBS}")


def report(title: str, figure: str, baseline: Starts, single: Starts, gang: Starts) -> None:
    base, one, two = (getattr(s, figure) for s in (baseline, single, gang))
    print(title)
    print(f"  one machine (baseline):         {summary(base)}")
    print(f"  1-node job on a joined node:    {summary(one)}")
    print(f"  2-node job over 2 joined nodes: {summary(two)}")
    median = statistics.median
    print(
        f"  ratio of medians: 2-node / 1-node on the pool {median(two) / median(one):.2f}   "
        f"pool 1-node / one machine {median(one) / median(base):.2f}"
    )


def one_machine(jobs: int, workdir: str) -> Starts:
    server = start_server()
    try:
        return starts(server, jobs, {"workdir": workdir})
    finally:
        server.stop()


def pool(jobs: int, gang_jobs: int, workdir: str) -> tuple[list[float], Starts, Starts]:
    started = Pool.start(scratch("gpupool-bench-pool-"))
    try:
        joined = [started.join(f"n{i}", "4xH100-SXM5-80GB:80GiB") for i in (1, 2, 3)]
        on_joined = {"workdir": workdir, "gpu_types": ["H100"]}  # not on the head's A100s
        single = starts(started.server, jobs, on_joined)
        gang = starts(started.server, gang_jobs, on_joined | {"nodes": 2})
        return [node.seconds or 0.0 for node in joined], single, gang
    finally:
        started.stop()


def starts(server, jobs: int, spec: dict) -> Starts:  # noqa: ANN001
    """``jobs`` jobs of one GPU per node, one after the other, each to its end."""
    found = Starts()
    nodes = spec.get("nodes", 1)
    with client(server) as api:
        for _ in range(jobs):
            body = {"command": CLOCK, "resources": {"gpus": 1}} | spec
            job_id = api.post("/jobs", json=body).json()["id"]
            wait_until(lambda j=job_id: api.get(f"/jobs/{j}").json()["status"] in FINAL, 60)
            job = api.get(f"/jobs/{job_id}").json()
            if job["status"] != "succeeded":
                raise RuntimeError(f"job {job_id} {job['status']}: {job['message']}")
            clocks = task_clocks(api, job_id, nodes)
            found.first.append(job["started_at"] - job["submitted_at"])
            found.all_ranks.append(max(clocks) - job["submitted_at"])
    return found


def task_clocks(api, job_id: int, tasks: int) -> list[float]:  # noqa: ANN001
    """The start time each task printed, from the job's log (whole once the job has ended)."""
    clocks: list[float] = []

    def read() -> bool:
        text = api.get(f"/jobs/{job_id}/logs").json()["text"]
        clocks[:] = [float(v) for v in CLOCK_LINE.findall(text)]
        return len(clocks) == tasks

    wait_until(read, 10, 0.1)
    return clocks


if __name__ == "__main__":
    main()
