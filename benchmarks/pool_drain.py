"""The drain of JOBS short jobs over three joined Ray nodes, against JOBS bare Ray tasks doing
the same sleeps on the same Ray cluster, in the same run.

- gpupool: a pool (`gpupool server --ray`, nodes joined with `gpupool node join`) whose three
  joined nodes declare 8 GPUs each (24 slots; the head's own GPUs are kept out by the jobs'
  GPU type). JOBS one-GPU jobs running `sleep 0.1` (as benchmarks/drain.py) are queued as
  one job array (one request: how one queues many alike jobs), each job persisted with its
  attempt and events; timed from just before the submit to the server having recorded every
  one as ended (asked every 0.1 s).
- bare Ray: a driver on the same cluster (the pool's Ray token) runs JOBS `@ray.remote`
  tasks, each running the same `sleep 0.1` process, pinned round-robin to the same three
  nodes (their `gpupool-node:NAME` resources), each asking a CPU share such that a node runs
  8 at once: 24 slots too. Timed from the first `.remote()` to `ray.get` of all; twice, cold
  (Ray starts its workers) and warm (they are reused).

Beside each wall time, the CPU per job of everything the benchmark started (the server, its
bridge, the Ray nodes with their agents and workers, the runners and jobs: a cgroup of the
benchmark's own, harness.TreeCpu), which a busy machine moves far less than wall time.

Ray keeps to 127.0.0.1 only in a network namespace holding only loopback: as root this
script runs itself in one (scripts/loopback-only).

    .venv/bin/python benchmarks/pool_drain.py [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from harness import (
    TreeCpu,
    client,
    in_loopback_namespace,
    scratch,
    shared_workdir,
    stop_on_sigterm,
    wait_until,
)
from tests.support.pool import Pool

from gpupool.cluster.rayenv import node_resource, ray_environment, split_address

JOBS, SLEEP = 1000, 0.1
NODES, SLOTS_PER_NODE = ("n1", "n2", "n3"), 8
MAX_LIST = 1000  # the most jobs one GET /jobs lists
NODE_GPUS = f"{SLOTS_PER_NODE}xH100-SXM5-80GB:80GiB"
UNFINISHED = {"pending", "starting", "running"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--bare-ray", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-stat", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_ray:  # the driver, in a process of its own (see bare_ray)
        print(json.dumps(drive_ray_tasks(args.bare_ray, args.jobs, args.cpu_stat)))
        return
    in_loopback_namespace()
    stop_on_sigterm()
    slots = len(NODES) * SLOTS_PER_NODE
    print(
        f"drain of {args.jobs} jobs sleeping {SLEEP} s over {len(NODES)} joined Ray nodes, "
        f"{SLOTS_PER_NODE} slots each ({slots}; ideal {args.jobs * SLEEP / slots:.1f} s), "
        f"on a machine of {os.cpu_count()} CPUs that runs every node"
    )
    drained, ray = drain_both(args.jobs, TreeCpu())
    pooled = drained.seconds
    cpu = per_job(drained.cpu, args.jobs)
    print(f"  gpupool, submit -> every job recorded ended:  {pooled:6.1f} s{cpu}")
    print(
        f"    (the submit itself {drained.submit_seconds:.2f} s; jobs running at once, on "
        f"average: {drained.running_at_once:.1f} of {slots})"
    )
    print(
        f"  bare Ray tasks (num_cpus={ray['task_cpus']:g} of each node's {ray['node_cpus']:g} "
        f"CPUs, {SLOTS_PER_NODE} at once per node):"
    )
    print(f"    cold (Ray starts its workers):            {ray['cold']:6.1f} s")
    print(
        f"    warm (workers reused):                    {ray['warm']:6.1f} s"
        f"{per_job(ray.get('warm_cpu'), args.jobs)}"
    )
    print(
        f"  ratio gpupool / bare Ray: cold {pooled / ray['cold']:.2f}   "
        f"warm {pooled / ray['warm']:.2f}"
        + (f"   CPU (warm) {drained.cpu / ray['warm_cpu']:.2f}" if both_cpu(drained, ray) else "")
    )
    print(
        "  reference (one machine, 8 GPUs): gpupool 15.9 s, bare Ray tasks with worker reuse 17.2 s"
    )


def per_job(cpu: float | None, jobs: int) -> str:
    return f"   (CPU {1000 * cpu / jobs:.1f} ms per job)" if cpu is not None else ""


def both_cpu(drained: Drained, ray: dict) -> bool:
    return drained.cpu is not None and bool(ray.get("warm_cpu"))


@dataclass(frozen=True)
class Drained:
    seconds: float
    submit_seconds: float
    running_at_once: float  # the jobs' run times (as recorded) over the drain's seconds
    cpu: float | None  # CPU seconds of everything the benchmark started, over the drain


def drain_both(jobs: int, cpu: TreeCpu) -> tuple[Drained, dict]:
    """The pool's drain, then bare Ray tasks on the same cluster; ``cpu``: the benchmark's
    cgroup (made before anything is started, so that everything is counted)."""
    pool = Pool.start(scratch("gpupool-bench-pool-"))
    try:
        for name in NODES:
            pool.join(name, NODE_GPUS)
        pooled = drain_pool(pool, jobs, cpu)
        return pooled, bare_ray(pool, jobs, cpu)
    finally:
        pool.stop()


def drain_pool(pool: Pool, jobs: int, cpu: TreeCpu) -> Drained:
    """Seconds from the submit of ``jobs`` jobs (one array) to every one recorded ended."""
    spec = {
        "command": ["sleep", str(SLEEP)],
        "resources": {"gpus": 1},
        "gpu_types": ["H100"],  # the joined nodes' GPUs, not the head's
        "workdir": shared_workdir(),
        "array": {"indexes": f"0-{jobs - 1}"},
    }
    with client(pool.server) as api:
        used_before = cpu.seconds()
        began = time.monotonic()
        answer = api.post("/jobs", json=spec)
        if answer.status_code != 201:
            raise RuntimeError(f"submit answered {answer.status_code}: {answer.text[:300]}")
        submitted = time.monotonic() - began
        array_id = answer.json()["id"]
        counts: dict[str, int] = {}

        def ended() -> bool:
            counts.clear()
            counts.update(api.get(f"/jobs/arrays/{array_id}").json()["counts"])
            return not any(counts.get(status, 0) for status in UNFINISHED)

        wait_until(ended, 1800, 0.1)
        elapsed = time.monotonic() - began
        used_after = cpu.seconds()
        if counts.get("succeeded", 0) != jobs:
            raise RuntimeError(f"not every job succeeded: {counts}")
        used = None
        if used_before is not None and used_after is not None:
            used = used_after - used_before
        return Drained(elapsed, submitted, run_seconds(api, array_id) / elapsed, used)


def run_seconds(api, array_id: int) -> float:  # noqa: ANN001
    """The sum of the array's jobs' recorded run times (its newest MAX_LIST jobs)."""
    listed = api.get("/jobs", params={"array": array_id, "limit": MAX_LIST}).json()
    return sum(job["ended_at"] - job["started_at"] for job in listed)


def bare_ray(pool: Pool, jobs: int, cpu: TreeCpu) -> dict:
    """The bare Ray tasks' figures, from a driver run as a child process: a driver connected
    to the cluster is ended by Ray if the head goes, and Ray must be imported with the
    loopback switch already in the environment."""
    with client(pool.server) as api:
        address = api.get("/cluster").json()["address"]
    token = pool.server.data_dir / "cluster" / "ray-token"
    env = os.environ | ray_environment(token, split_address(address)[0])
    command = [sys.executable, __file__, "--bare-ray", address, "--jobs", str(jobs)]
    if cpu.stat is not None:  # the driver is in the benchmark's cgroup: it reads the same
        command += ["--cpu-stat", cpu.stat]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"the bare Ray driver failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def drive_ray_tasks(address: str, jobs: int, cpu_stat: str | None) -> dict:
    """As a Ray driver on the pool's cluster: ``jobs`` tasks, cold then warm; the CPU
    seconds of the benchmark's cgroup over the warm round, read from ``cpu_stat``."""
    import logging

    import ray

    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    node_cpus = min(cpus_of(node) for node in ray.nodes() if is_joined(node))
    task_cpus = node_cpus / SLOTS_PER_NODE
    sleeper = ray.remote(run_sleep)
    cold = ray_round(ray, sleeper, jobs, task_cpus)
    cpu = cgroup_cpu(cpu_stat)
    warm = ray_round(ray, sleeper, jobs, task_cpus)
    after = cgroup_cpu(cpu_stat)
    ray.shutdown()
    warm_cpu = after - cpu if after is not None and cpu is not None else None
    return {
        "cold": cold,
        "warm": warm,
        "warm_cpu": warm_cpu,
        "task_cpus": task_cpus,
        "node_cpus": node_cpus,
    }


def cgroup_cpu(stat: str | None) -> float | None:
    """CPU seconds in the benchmark's cgroup (its ``TreeCpu`` file), from the driver."""
    if stat is None:
        return None
    with open(stat) as f:
        text = f.read()
    if stat.endswith("cpuacct.usage"):
        return int(text) / 1e9
    return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6


def ray_round(ray, sleeper, jobs: int, task_cpus: float) -> float:  # noqa: ANN001
    began = time.monotonic()
    refs = [
        sleeper.options(
            num_cpus=task_cpus, resources={node_resource(NODES[i % len(NODES)]): 0.001}
        ).remote(SLEEP)
        for i in range(jobs)
    ]
    ray.get(refs)
    return time.monotonic() - began


def run_sleep(seconds: float) -> None:
    """What each job runs: a `sleep` process."""
    subprocess.run(["sleep", str(seconds)], check=True)


def is_joined(node: dict) -> bool:
    resources = node.get("Resources") or {}
    return node["Alive"] and any(node_resource(name) in resources for name in NODES)


def cpus_of(node: dict) -> float:
    return float(node["Resources"].get("CPU", 0))


if __name__ == "__main__":
    main()
