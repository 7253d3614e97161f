"""What a job was given is all it gets: its GPUs' device nodes only, its share of GPU memory
(a stand-in for NVML here; the real one on a GPU machine), its host memory."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from gpupool.runner.sandbox import members
from tests.security.conftest import Pool
from tests.support.waiting import wait_for

GIB = 1024**3
HOLD = (
    "import os, sys, time\n"
    "nodes = sorted(n for n in os.listdir('/dev') if n.startswith('nvidia'))\n"
    "print('NODES=' + ','.join(nodes), flush=True)\n"
    "print('VISIBLE=' + os.environ.get('CUDA_VISIBLE_DEVICES', ''), flush=True)\n"
    "while not os.path.exists('release'):\n"
    "    time.sleep(0.05)\n"
)


def line(log: str, key: str) -> str:
    return next(x for x in log.splitlines() if x.startswith(key + "="))[len(key) + 1 :]


def test_each_job_sees_only_the_device_node_of_its_gpu(pool: Pool, exchange: Path) -> None:
    _, client = pool.member("team-a")
    jobs = [
        pool.submit(
            client, [sys.executable, "-c", HOLD], resources={"gpus": 1}, workdir=str(exchange)
        )
        for _ in range(4)
    ]
    for job in jobs:
        wait_for(lambda job=job: "NODES=" in pool.log(job["id"]), 60, "each job to look")
    seen = [line(pool.log(job["id"]), "NODES").split(",") for job in jobs]
    (exchange / "release").touch()
    gpus = [[n for n in nodes if n[6:].isdigit()] for nodes in seen]
    assert all(len(found) == 1 for found in gpus), seen
    assert sorted(found[0] for found in gpus) == ["nvidia0", "nvidia1", "nvidia2", "nvidia3"]
    assert all({"nvidiactl", "nvidia-uvm"} <= set(nodes) for nodes in seen)
    for job in jobs:
        assert pool.wait(job["id"], {"succeeded", "failed"})["status"] == "succeeded"


def test_a_cpu_job_sees_no_gpu_device(pool: Pool, exchange: Path) -> None:
    _, client = pool.member("team-a")
    job = pool.submit(client, [sys.executable, "-c", HOLD], workdir=str(exchange))
    wait_for(lambda: "NODES=" in pool.log(job["id"]), 60, "the job to look")
    (exchange / "release").touch()
    assert line(pool.log(job["id"]), "NODES") == ""


def test_a_fraction_over_its_gpu_memory_share_is_stopped(pool: Pool, exchange: Path) -> None:
    _, client = pool.member("team-a")
    job = pool.submit(
        client, [sys.executable, "-c", HOLD], resources={"gpus": 0.25}, workdir=str(exchange)
    )
    wait_for(lambda: "NODES=" in pool.log(job["id"]), 60, "the job to run")
    uuid = json.loads((pool.attempt_dir(job["id"]) / "spec.json").read_text())["gpu_uuids"][0]
    pid = _job_pid(pool, job["id"])
    samples = pool.home.parent / "nvml.json"
    samples.write_text(json.dumps({uuid: {str(pid): 15 * GIB}}))  # under its 20 GiB share
    time.sleep(2.5)  # longer than the grace: nothing happens to a job within its share
    assert pool.job(job["id"])["status"] == "running"

    samples.write_text(json.dumps({uuid: {str(pid): 30 * GIB}}))
    ended = pool.wait(job["id"], {"succeeded", "failed", "lost"})
    assert (ended["status"], ended["reason"]) == ("failed", "GpuMemoryExceeded"), ended
    assert "used 30.0 GiB of GPU memory" in ended["message"]
    assert "over its share of 20.0 GiB" in ended["message"]
    assert "GpuMemoryExceeded" in [e["reason"] for e in ended["events"]]


def test_host_memory_is_held_to_the_request_or_said_not_to_be(pool: Pool) -> None:
    _, client = pool.member("team-a")
    grab = "b = bytearray(256 * 2**20); b[::4096] = b'x' * (len(b) // 4096); print('survived')"
    job = pool.submit(client, [sys.executable, "-c", grab], resources={"memory_bytes": "96MiB"})
    ended = pool.wait(job["id"], {"succeeded", "failed", "lost"})
    if pool.as_root:  # cgroups: the kernel kills it at its limit
        assert (ended["status"], ended["reason"]) == ("failed", "MemoryExceeded"), ended
        assert "ran out of its 96 MiB of host memory" in ended["message"]
    else:  # no cgroup to write: it runs, and its events say the limit is not enforced
        notes = [e["message"] for e in ended["events"] if e["reason"] == "LimitsNotEnforced"]
        assert notes and "not enforced" in notes[0], ended["events"]


def _job_pid(pool: Pool, job_id: int) -> int:
    """A host PID of the job's own process (its sandbox's, but the init)."""
    sandbox = wait_for(lambda: pool.state(job_id).get("sandbox"), 30, "the sandbox's record")
    return next(p for p in members(sandbox["pid_namespace"]) if p != sandbox["init_pid"])
