"""How long a ``gpupool`` CLI call takes from exec to exit, against a real server.

Each command runs as a fresh process, as a user's shell runs it: the installed ``gpupool``
console script next to this Python. ``gpupool ls`` talks to a real server started on
127.0.0.1 (8 declared GPUs, a handful of finished jobs to list). Baseline in the same run:
``python -c pass``, the floor of any Python command. Bytecode is cached as after an install:
one untimed warm-up run of each command writes what is missing. Each run's CPU time (user +
system, from the kernel's account of the finished child) is shown beside its wall time: on a
busy machine it moves far less than the wall time does.

    .venv/bin/python benchmarks/cli_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import FINAL, client, start_server, wait_until

RUNS = 30
JOBS = 5  # finished jobs on the server, so that `ls` lists something


@dataclass
class Timing:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    code: int = 0


def timed(command: list[str], env: dict[str, str], runs: int) -> Timing:
    """Wall and CPU seconds of each of ``runs`` runs (after one warm-up), the last exit code."""
    timing = Timing(code=subprocess.run(command, env=env, capture_output=True).returncode)
    for _ in range(runs):
        before, start = _children_cpu(), time.perf_counter()
        timing.code = subprocess.run(command, env=env, capture_output=True).returncode
        timing.wall.append(time.perf_counter() - start)
        timing.cpu.append(_children_cpu() - before)
    return timing


def _children_cpu() -> float:
    """CPU seconds of the children waited for so far (the server is not: it still runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def seed_jobs(server) -> None:  # noqa: ANN001
    """A few finished jobs, so that the listing has rows to fetch and render."""
    with client(server) as api:
        ids = [
            api.post("/jobs", json={"command": ["true"], "resources": {"gpus": 1}}).json()["id"]
            for _ in range(JOBS)
        ]

        def done() -> bool:
            return all(api.get(f"/jobs/{i}").json()["status"] in FINAL for i in ids)

        wait_until(done, 60)


def cli_env(url: str, token: str) -> dict[str, str]:
    """The user's environment, logged in through GPUPOOL_URL/TOKEN, bytecode cached."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"GPUPOOL_URL": url, "GPUPOOL_TOKEN": token}


def report(label: str, timing: Timing, floor: Timing) -> None:
    wall, cpu = statistics.median(timing.wall), statistics.median(timing.cpu)
    ratio = wall / statistics.median(floor.wall), cpu / statistics.median(floor.cpu)
    note = "" if timing.code == 0 else f"   (exit {timing.code})"
    print(
        f"  {label:<26} wall median {wall * 1000:6.1f} ms (min {min(timing.wall) * 1000:6.1f}) "
        f"x{ratio[0]:5.1f}   cpu median {cpu * 1000:6.1f} ms x{ratio[1]:5.1f}{note}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs per command ({RUNS})")
    runs = parser.parse_args().runs
    gpupool = str(Path(sys.executable).with_name("gpupool"))
    server = start_server()
    try:
        seed_jobs(server)
        env = cli_env(server.url, server.token or "")
        commands = {
            "python -c pass (baseline)": [sys.executable, "-c", "pass"],
            "gpupool --version": [gpupool, "--version"],
            "gpupool --help": [gpupool, "--help"],
            "gpupool ls (round trip)": [gpupool, "ls"],
        }
        print(f"CLI start-up, {runs} runs each, a fresh process per run; x: ratio to the baseline")
        results = {label: timed(command, env, runs) for label, command in commands.items()}
        for label, timing in results.items():
            report(label, timing, results["python -c pass (baseline)"])
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
