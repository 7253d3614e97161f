"""A Kubeflow PyTorchJob of a Master and one Worker, applied unchanged, runs on two nodes of
the pool (gloo on the CPU): its ranks join one process group over the rendezvous gpupool
gives them, and see exactly the variables that `gpupool run --nodes 2 --launcher torch`
gives its ranks (MASTER_ADDR/PORT, RANK, WORLD_SIZE, torchrun's and the operator's)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli, wait_status
from tests.support.kubeflow import pod, pytorch_job, replica
from tests.support.pool import Pool

# what a rank is told of the rendezvous, by the operator (PET_*) and by torchrun
TOLD = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
RENDEZVOUS = f"""\
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
told = {{name: os.environ.get(name) for name in {TOLD!r}}}
print("told " + json.dumps(told | {{"sum": total.item(), "size": dist.get_world_size()}}))
dist.destroy_process_group()
"""
ENV = [{"name": "GLOO_SOCKET_IFNAME", "value": "lo"}]  # gloo's sockets on loopback


def told(log: str) -> dict[str, dict]:
    """What each rank printed, by its RANK."""
    found = [json.loads(line) for line in re.findall(r"told (\{.*\})", log)]
    return {rank["RANK"]: rank for rank in found}


def unset(rank: dict) -> set[str]:
    return {name for name, value in rank.items() if value is None}


def ended(cli: Cli, job_id: int) -> tuple[dict, str]:
    job = wait_status(cli, job_id, {"succeeded", "failed", "lost"}, timeout=240)
    log = cli.ok("logs", str(job_id))
    assert job["status"] == "succeeded", log
    return job, log


def test_a_pytorch_job_sees_the_rendezvous_of_a_torch_job_over_two_nodes(
    pool: Pool, pool_cli: Cli, exchange: Path
) -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed: make test installs it")
    (exchange / "rendezvous.py").write_text(RENDEZVOUS)
    main = {  # no image: applied with ignore_image, it runs on the nodes' own system
        "name": "pytorch",
        "command": [sys.executable, "rendezvous.py"],
        "env": ENV,
        "workingDir": str(exchange),
    }
    manifest = pytorch_job(
        {"Master": replica(1, pod(main)), "Worker": replica(1, pod(main))}, name="rdzv"
    )
    headers = {"Authorization": f"Bearer {pool.server.token}"}
    answer = httpx.post(
        f"{pool.server.url}/api/v1/apply",
        json={"documents": [manifest], "ignore_image": True},
        headers=headers,
    )
    assert answer.status_code == 200, answer.text
    applied = answer.json()["documents"][0]["id"]
    job, log = ended(pool_cli, applied)
    assert job["spec"]["nodes"] == 2 and job["spec"]["launcher"] == "torch"
    from_manifest = told(log)

    plain = pool_cli.submit(
        *("--workdir", str(exchange), "--nodes", "2", "--env", "GLOO_SOCKET_IFNAME=lo"),
        *("--launcher", "torch", "--", sys.executable, "rendezvous.py"),
    )
    _, log = ended(pool_cli, plain)
    from_run = told(log)

    assert set(from_manifest) == set(from_run) == {"0", "1"}
    for rank in ("0", "1"):
        mine, theirs = from_manifest[rank], from_run[rank]
        assert mine["sum"] == 3.0 and mine["size"] == 2  # one process group of both ranks
        assert unset(mine) == unset(theirs)
        same = TOLD[2:7] + ("PET_NNODES", "PET_NODE_RANK")
        assert {k: mine[k] for k in same} == {k: theirs[k] for k in same}
        assert mine["MASTER_ADDR"] == from_manifest["0"]["MASTER_ADDR"]
        assert mine["MASTER_PORT"] == from_manifest["0"]["MASTER_PORT"]
        assert mine["WORLD_SIZE"] == "2" and mine["PET_NNODES"] == "2"
