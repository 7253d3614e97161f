"""Drain time of 1,000 queued 1-GPU jobs that each sleep 0.1 s, on 8 declared GPUs.

The ideal is 1,000 x 0.1 s / 8 = 12.5 s. Baseline in the same run: 8 worker threads running
the same 1,000 'sleep 0.1' processes directly, the floor on this machine. The server drains
twice in the same run: with isolation on (the default: each job in its sandbox) and off.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from harness import TreeCpu, client, start_server, wait_until

JOBS, GPUS, SLEEP = 1000, 8, 0.1
IDEAL = JOBS * SLEEP / GPUS
CPU = TreeCpu()  # CPU per job of everything the benchmark starts, where a cgroup can tell


def baseline() -> float:
    start, cpu = time.perf_counter(), CPU.seconds()
    with ThreadPoolExecutor(GPUS) as pool:
        list(pool.map(lambda _: subprocess.run(["sleep", str(SLEEP)], check=True), range(JOBS)))
    _say_cpu("baseline", cpu)
    return time.perf_counter() - start


def _say_cpu(what: str, before: float | None) -> None:
    after = CPU.seconds()
    if before is not None and after is not None:
        print(f"  CPU per job ({what}): {1000 * (after - before) / JOBS:.1f} ms")


def platform(isolation: str = "on") -> float:
    server = start_server({"GPUPOOL_ISOLATION": isolation})
    try:
        with client(server) as api:
            hold = api.post(
                "/jobs", json={"command": ["sleep", "600"], "resources": {"gpus": GPUS}}
            ).json()
            wait_until(lambda: api.get(f"/jobs/{hold['id']}").json()["status"] == "running", 60)
            spec = {"command": ["sleep", str(SLEEP)], "resources": {"gpus": 1}}
            ids = [api.post("/jobs", json=spec).json()["id"] for _ in range(JOBS)]
            start, cpu = time.monotonic(), CPU.seconds()
            api.post(f"/jobs/{hold['id']}/cancel")
            wait_until(lambda: _all_done(api, ids), 600, 0.25)
            elapsed = time.monotonic() - start
            _say_cpu(f"isolation {isolation}, server and everything it starts", cpu)
            failed = [
                j
                for j in api.get(
                    "/jobs", params={"limit": 1000, "status": ["failed", "lost"]}
                ).json()
            ]
            assert not failed, f"{len(failed)} jobs failed"
            return elapsed
    finally:
        server.stop()


def _all_done(api, ids: list[int]) -> bool:  # noqa: ANN001
    """Cheap to ask, so that watching does not slow the server: is anything still queued?"""
    unfinished = api.get("/jobs", params={"limit": 1, "status": ["pending", "starting", "running"]})
    return not unfinished.json()


def main() -> None:
    print(
        f"drain of {JOBS} queued 1-GPU jobs sleeping {SLEEP} s on {GPUS} GPUs (ideal {IDEAL:.1f} s)"
    )
    floor = baseline()
    print(f"  baseline: {GPUS} threads running the processes directly   {floor:6.1f} s")
    off = platform("off")
    print(f"  gpupool, isolation off: queued -> all ended           {off:6.1f} s")
    took = platform("on")
    print(f"  gpupool, isolation on (default): queued -> all ended  {took:6.1f} s")
    print(f"  ratio gpupool / ideal: {took / IDEAL:.2f}   gpupool / direct: {took / floor:.2f}")
    print(f"  ratio isolation on / off: {took / off:.2f}")
    print("  reference (Slurm 22.05, same kind of machine): 264 s default, 105 s tuned")


if __name__ == "__main__":
    sys.exit(main())
