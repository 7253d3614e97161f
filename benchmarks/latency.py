"""Submit -> process-start latency of trivial jobs on an idle pool of 8 declared GPUs.

Each job is submitted through the REST API to a real server, one after the other; the latency
is the runner's recorded start of the workload minus the server's acknowledged submit time.
The server runs several times in the same run: with isolation on (every job in its bubblewrap
sandbox, under its own account when run as root, on a network of its own: a warm namespace
with pasta's egress attached), on the node's network, without warm namespaces (each job's
made and pasta configured at its start), and with isolation off. Run it where the node has
a route (not in ``scripts/loopback-only``'s namespace), or pasta gives up at once.
Baselines in the same run: the bare cost of spawning a process, and the local executor alone
(runner launch without server, database or scheduler), unsandboxed and sandboxed.
"""

from __future__ import annotations

import subprocess
import sys
import time

from harness import FINAL, client, percentile, scratch, start_server, summary, wait_until

from gpupool.executors.isolation import Isolation
from gpupool.executors.local import LocalExecutor
from gpupool.executors.task import Observed, TaskSpec
from gpupool.settings import Settings

JOBS = 200
SPACED = 0.1  # seconds between jobs in the spaced rows


def bare_spawn(n: int) -> list[float]:
    """Popen of a trivial program until it has exited: the floor of any launch."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.Popen(["true"]).wait()
        times.append(time.perf_counter() - start)
    return times


def executor_only(n: int, sandboxed: bool = False, network: str = "host") -> list[float]:
    data = scratch("gpupool-bench-exec-")
    isolation = Isolation(Settings(data_dir=data)) if sandboxed else None
    executor = LocalExecutor(data / "jobs", isolation=isolation)
    times = []
    for job_id in range(1, n + 1):
        task = TaskSpec(job_id, 1, "local", ["true"], {}, None, [], 1 << 20, 1.0, network=network)
        start = time.time()
        handle = executor.start(task)
        wait_until(lambda h=handle: executor.poll(h).observed in (Observed.EXITED,), 30, 0.001)
        times.append(executor.poll(handle).started_at - start)
        executor.release(handle)
    return times


def platform(
    n: int, isolation: str = "on", network: str = "on", warm: int = 2, gap: float = 0.0
) -> list[float]:
    """``gap``: seconds between one job's end and the next submit (0: back to back)."""
    env = {"GPUPOOL_ISOLATION": isolation, "GPUPOOL_NETWORK_ISOLATION": network}
    server = start_server(env | {"GPUPOOL_WARM_NETWORKS": str(warm)})
    try:
        with client(server) as api:
            times = []
            for _ in range(n):
                job = api.post("/jobs", json={"command": ["true"], "resources": {"gpus": 1}}).json()
                done = _wait_final(api, job["id"])
                times.append(done["started_at"] - done["submitted_at"])
                time.sleep(gap)
            return times
    finally:
        server.stop()


def _added(times: list[float], baseline: list[float], q: int) -> str:
    return f"{1000 * (percentile(times, q) - percentile(baseline, q)):+.1f} ms"


def _wait_final(api, job_id: int) -> dict:  # noqa: ANN001
    while True:
        job = api.get(f"/jobs/{job_id}").json()
        if job["status"] in FINAL:
            return job
        time.sleep(0.005)


def main() -> None:
    print(f"submit -> process start, {JOBS} trivial 1-GPU jobs, idle pool of 8 declared GPUs")
    spawn = bare_spawn(JOBS)
    print(f"  baseline: bare process spawn      {summary(spawn)}")
    runner = executor_only(JOBS)
    print(f"  baseline: local executor alone    {summary(runner)}")
    boxed = executor_only(JOBS, sandboxed=True)
    print(f"  local executor, sandboxed         {summary(boxed)}")
    netns = executor_only(JOBS, sandboxed=True, network="isolated")
    print(f"  local executor, own network       {summary(netns)}")
    print(f"  own network adds (executor): p50 {_added(netns, boxed, 50)}")
    off = platform(JOBS, "off")
    print(f"  gpupool, isolation off            {summary(off)}")
    shared = platform(JOBS, "on", network="off")
    print(f"  gpupool, sandbox, node's network  {summary(shared)}")
    cold = platform(JOBS, "on", warm=0)
    print(f"  gpupool, no warm namespaces       {summary(cold)}")
    full = platform(JOBS, "on")
    print(f"  gpupool, isolation on (default)   {summary(full)}")
    p50 = percentile(full, 50)
    print(f"  isolation adds: p50 {_added(full, off, 50)}, p95 {_added(full, off, 95)}")
    print(f"  own network adds: p50 {_added(full, shared, 50)}, p95 {_added(full, shared, 95)}")
    print(f"  without warm namespaces it adds: p50 {_added(cold, shared, 50)}")
    # back to back, each launch shares the CPUs with pasta making the next namespace (20-30
    # ms of CPU); jobs that arrive further apart find it made
    spaced_shared = platform(JOBS // 2, "on", network="off", gap=SPACED)
    spaced = platform(JOBS // 2, "on", gap=SPACED)
    print(f"  jobs {SPACED:g} s apart, node's network  {summary(spaced_shared)}")
    print(f"  jobs {SPACED:g} s apart, own network     {summary(spaced)}")
    print(f"  own network adds, jobs {SPACED:g} s apart: p50 {_added(spaced, spaced_shared, 50)}")
    print(f"  ratio p50 gpupool / executor alone: {p50 / percentile(runner, 50):.2f}")
    print("  reference (Slurm 22.05, same kind of machine): 2.27 s default, 0.26 s tuned")
    print(f"  ratio Slurm tuned / gpupool p50: {0.26 / p50:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
