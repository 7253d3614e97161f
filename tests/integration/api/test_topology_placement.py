"""Multi-GPU jobs land on GPUs that share NVLink, on a declared node with two NVLink pairs."""

from __future__ import annotations

import sys
from pathlib import Path

from gpupool.discovery.declared import declared_uuid
from tests.support.platform import make_settings, running_app, submit, wait_job

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
PAIRS = [{0, 2}, {1, 3}]  # not neighbours by index: only the links tell them apart


def test_a_two_gpu_job_gets_one_nvlink_pair(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path / "data",
        declared_gpus="4xA100-SXM4-80GB:80GiB",
        declared_links="0-2:NV4,1-3:NV4,0-1:SYS,0-3:SYS,1-2:SYS,2-3:SYS",
    )
    index = {declared_uuid("node-a", i): i for i in range(4)}
    with running_app(settings) as (client, _platform):
        node = client.get("/api/v1/nodes").json()[0]
        assert {g["index"]: g["domain"] for g in node["gpus"]} == {0: 0, 2: 0, 1: 1, 3: 1}
        links = node["inventory"]["links"]
        assert {(link["a"], link["b"]) for link in links if link["kind"] == "NVLINK"} == {
            (0, 2),
            (1, 3),
        }
        jobs = [submit(client, SLEEP, resources={"gpus": 2}) for _ in range(2)]
        running = [wait_job(client, job["id"], {"running"}) for job in jobs]
        held = [{index[g["uuid"]] for g in job["placement"]["gpus"]} for job in running]
        assert sorted(held, key=min) == PAIRS
        for job in jobs:
            client.post(f"/api/v1/jobs/{job['id']}/cancel")
        assert wait_job(client, jobs[0]["id"])["status"] == "cancelled"
