"""Jobs over several nodes of the pool: all tasks start together, each told where it stands,
their logs merged whole into the job's log, a real PyTorch DDP training across two Ray nodes
(gloo on the CPU) that ends with the same weights on both ranks, and a real MPI allreduce
whose remote daemon gpupool's own rsh agent starts (no ssh)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli, wait_status
from tests.support.distributed import MPI_EXAMPLE, needs_open_mpi
from tests.support.pool import Pool

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def submit(pool: Pool, command: list[str], workdir: Path, **spec: object) -> int:
    """A job through the API (the CLI's flags for these are tested on their own)."""
    headers = {"Authorization": f"Bearer {pool.server.token}"}
    body = {"command": command, "workdir": str(workdir), **spec}
    answer = httpx.post(f"{pool.server.url}/api/v1/jobs", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_a_job_over_two_nodes_runs_one_task_on_each(
    pool: Pool, pool_cli: Cli, exchange: Path
) -> None:
    script = 'echo "task $GPUPOOL_TASK_INDEX of $GPUPOOL_TASK_COUNT on $GPUPOOL_NODE"'
    job_id = submit(pool, ["sh", "-c", script], exchange, nodes=2, resources={"gpus": 2})
    job = wait_status(pool_cli, job_id, {"succeeded", "failed", "lost"})
    assert job["status"] == "succeeded", (job["message"], pool_cli.ok("logs", str(job_id)))
    lines = sorted(pool_cli.ok("logs", str(job_id)).splitlines())
    assert len(lines) == 2
    found = [re.fullmatch(r"\[task (\d)\] task (\d) of 2 on (\S+)", line) for line in lines]
    assert all(found), lines
    assert [m.group(1) for m in found] == ["0", "1"]
    assert all(m.group(1) == m.group(2) for m in found)
    assert found[0].group(3) != found[1].group(3)  # a node of its own each
    shown = pool_cli.ok("show", str(job_id))
    assert "placement:  task 0 on node" in shown and "placement:  task 1 on node" in shown
    listed = pool_cli.ok("ls", "--all")
    assert re.search(rf"\b{job_id}\b.*\b\w+\+\w+\b", listed), listed  # "n1+n2"
    fabric = [e["message"] for e in pool_cli.job(job_id)["events"] if e["reason"] == "Fabric"]
    assert len(fabric) == 2 and all("runs over TCP on lo" in said for said in fabric), fabric


def test_when_one_task_fails_the_other_is_stopped_and_the_job_fails(
    pool: Pool, pool_cli: Cli, exchange: Path
) -> None:
    script = 'if [ "$GPUPOOL_TASK_INDEX" = 1 ]; then exit 3; fi; sleep 600'
    job_id = submit(pool, ["sh", "-c", script], exchange, nodes=2, resources={"gpus": 2})
    job = wait_status(pool_cli, job_id, {"succeeded", "failed", "lost"}, timeout=120)
    assert job["status"] == "failed"
    assert job["exit_code"] == 3
    assert "task 1" in job["message"]
    held = [
        g["uuid"]
        for n in pool_cli.json("nodes")
        for g in n["gpus"]
        if any(h["job_id"] == job_id for h in g.get("holders") or ())
    ]
    assert held == []  # both tasks' GPUs (the session pool may run other tests' work)


# the command of --per-node: it runs torchrun itself, which reads the PET_* variables
TORCHRUN_ITSELF = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1"]


@pytest.mark.parametrize(
    ("mode", "runner"),
    [([], []), (["--torchrun"], []), (["--per-node"], TORCHRUN_ITSELF)],
    ids=["per-gpu", "torchrun", "per-node"],
)
def test_pytorch_ddp_trains_across_two_ray_nodes(
    pool_cli: Cli, exchange: Path, mode: list[str], runner: list[str]
) -> None:
    """A real DDP training (gloo, CPU) over two Ray nodes: one process per GPU with
    torchrun's variables, one torchrun per node, or the user's own torchrun on each node
    finding its rendezvous in the PyTorchJob operator's PET_* variables; the loss falls, the
    weights agree."""
    pytest.importorskip("torch", reason="PyTorch is not installed: make test installs it")
    (exchange / "ddp_train.py").write_text((EXAMPLES / "ddp_train.py").read_text())
    program = [*runner, "ddp_train.py"] if runner else [sys.executable, "ddp_train.py"]
    job_id = pool_cli.submit(
        *("--workdir", str(exchange), "--nodes", "2", "--gpus-per-node", "1"),
        *("--launcher", "torch", *mode, "--", *program),
    )
    job = wait_status(pool_cli, job_id, {"succeeded", "failed", "lost"}, timeout=240)
    log = pool_cli.ok("logs", str(job_id))
    assert job["status"] == "succeeded", log
    losses = [float(v) for v in re.findall(r"\[(?:rank|task) 0\] loss \d+ (\S+)", log)]
    assert len(losses) > 2 and losses[-1] < losses[0], log
    weights = dict(re.findall(r"\[(?:rank|task) (\d)\] (?:\[rank \d\] )?weights (\S+)", log))
    assert set(weights) == {"0", "1"} and weights["0"] == weights["1"], log


# each rank says where it runs (its daemon's environment: its own task's), then joins
WHERE = 'echo "rank $OMPI_COMM_WORLD_RANK task $GPUPOOL_TASK_INDEX on $GPUPOOL_NODE"; exec "$@"'


@needs_open_mpi
@pytest.mark.parametrize("mode", [[], ["--mpirun"]], ids=["gpupools-mpirun", "its-own-mpirun"])
def test_an_mpi_allreduce_runs_across_two_ray_nodes_through_gpupools_agent(
    pool_cli: Cli, exchange: Path, mode: list[str]
) -> None:
    """mpirun on task 0 starts task 1's daemon through gpupool's rsh agent (no ssh): the
    ranks run one on each node, in their own task, and the allreduce sums over both. With
    --mpirun the command is the mpirun line (an MPIJob Launcher's), which finds gpupool's
    hostfile and agent in its environment."""
    (exchange / "mpi_allreduce.py").write_text(MPI_EXAMPLE.read_text())
    own = ["mpirun", "-n", "2"] if mode else []
    job_id = pool_cli.submit(
        *("--workdir", str(exchange), "--nodes", "2", "--gpus-per-node", "1"),
        *("--launcher", "mpi", *mode, "--", *own, "sh", "-c", WHERE, "sh"),
        *(sys.executable, "mpi_allreduce.py"),
    )
    job = wait_status(pool_cli, job_id, {"succeeded", "failed", "lost"}, timeout=240)
    log = pool_cli.ok("logs", str(job_id))
    assert job["status"] == "succeeded", (job["message"], log)
    assert re.search(r"^\[task 0\] allreduce 3 size 2$", log, re.MULTILINE), log
    where = dict(re.findall(r"^\[task 0\] rank (\d) (task \d on \S+)$", log, re.MULTILINE))
    nodes = [t["node"] for t in job["placement"]["tasks"]]
    assert where == {"0": f"task 0 on {nodes[0]}", "1": f"task 1 on {nodes[1]}"}, log
