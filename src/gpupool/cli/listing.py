"""``gpupool ls``: what it asks the server and the rows it prints, and the texts of a job's
request and placement that ``gpupool show`` and ``gpupool queue`` print too.

Typer-free, so that ``gpupool ls`` runs without Typer (gpupool.cli.quick); its Typer command,
with the options and help, is gpupool.cli.jobs.ls.
"""

from __future__ import annotations

from typing import Any

from gpupool.cli import arrays
from gpupool.cli.connection import connect
from gpupool.cli.output import (
    Cell,
    Output,
    age,
    duration,
    memory,
    print_json,
    print_table,
    share,
    status_cell,
    visible,
)
from gpupool.client import Client

COLUMNS = ("ID", "NAME", "USER", "TEAM", "STATUS", "GPUS", "NODE", "AGE", "REASON")
ACTIVE = ["pending", "starting", "running"]
FINAL = {"succeeded", "failed", "cancelled", "lost"}
LAUNCHER_NAMES = {  # by launcher and mode
    "torch": "torch, one process per GPU",
    "torch torchrun": "torch, one torchrun per node",
    "torch per-node": "torch, the command once per node",
    "tensorflow": "tensorflow",
    "tensorflow chief": "tensorflow, the first node the chief",
    "mpi": "mpi",
    "mpi mpirun": "mpi, the command's own mpirun",
}


def list_jobs(
    all_: bool = False,
    status: list[str] | None = None,
    team: str | None = None,
    user: str | None = None,
    limit: int = 100,
    array: int | None = None,
    output: Output = Output.TABLE,
) -> None:
    """Print the jobs ``gpupool ls`` lists (its options are gpupool.cli.jobs.ls's)."""
    statuses = status or ([] if all_ else ACTIVE)
    filters = {"status": statuses, "team": team, "user": user, "limit": limit}
    with connect() as client:
        if array is not None or output == Output.JSON:
            found = client.jobs(**filters, array=array)
            if output == Output.JSON:
                print_json(found)
                return
            rows = [(0, job_row(job)) for job in found]
        else:
            rows = listed_rows(client, filters)
    print_table(COLUMNS, [row for _, row in rows[:limit]])


def gpus_text(resources: dict[str, Any]) -> str:
    """'1', '0.5', '20 GiB' or '2 (>=40 GiB)' for a job's GPU request."""
    count, gpu_memory = resources.get("gpus") or 0, resources.get("gpu_memory_bytes")
    if not count and not gpu_memory:
        return "-"
    if not gpu_memory:
        return share(count)
    if not count:
        return memory(gpu_memory)
    return f"{share(count)} ({memory(gpu_memory)})"


def request_text(spec: dict[str, Any]) -> str:
    """The GPUS column: ``gpus_text``, or for a job over several nodes (or with a launcher)
    '2 nodes × 4 GPUs, torch'."""
    if not is_gang(spec):
        return gpus_text(spec["resources"])
    nodes = spec.get("nodes") or 1
    text = f"{nodes} node{'' if nodes == 1 else 's'} × {node_gpus_text(spec['resources'])}"
    return text + (f", {launcher_text(spec)}" if spec.get("launcher") else "")


def is_gang(spec: dict[str, Any]) -> bool:
    """A job over several nodes, or one started by a launcher (JobSpec.is_gang)."""
    return (spec.get("nodes") or 1) > 1 or bool(spec.get("launcher"))


def node_gpus_text(resources: dict[str, Any]) -> str:
    """What one node of a gang gets: '4 GPUs', '1 GPU (40 GiB)', '0.5 GPU', 'no GPU'."""
    count, gpu_memory = resources.get("gpus") or 0, resources.get("gpu_memory_bytes")
    if not count:
        return f"{memory(gpu_memory)} of one GPU" if gpu_memory else "no GPU"
    text = f"{share(count)} GPU{'s' if count > 1 else ''}"
    return text + (f" ({memory(gpu_memory)})" if gpu_memory else "")


def launcher_text(spec: dict[str, Any]) -> str:
    """'torch, one process per GPU', 'torch, one torchrun per node', 'mpi, 4 per node';
    '-' for none."""
    if not spec.get("launcher"):
        return "-"
    mode, procs = spec.get("launcher_mode"), spec.get("procs_per_node")
    key = spec["launcher"] + (f" {mode}" if mode and mode != "per-gpu" else "")
    if procs and key == "torch":
        return f"torch, {procs} process{'es' if procs > 1 else ''} per node"
    text = LAUNCHER_NAMES.get(key, spec["launcher"])
    return f"{text}, {procs} per node" if procs else text


def age_text(job: dict[str, Any]) -> str:
    """Pending: time since submission; running: time since start; ended: how long it ran."""
    start = job.get("started_at") or job["submitted_at"]
    if job["status"] == "pending":
        return age(job["submitted_at"])
    if job["status"] in FINAL:
        return duration((job.get("ended_at") or start) - start)
    return age(start)


def reason_text(job: dict[str, Any]) -> str:
    """The reason code, with the queue position of a pending job."""
    reason = job.get("reason") or "-"
    if job["status"] == "pending" and job.get("position"):
        return f"{reason} (#{job['position']})"
    if job["status"] == "failed" and job.get("exit_code") is not None:
        return f"{reason} (exit {job['exit_code']})"
    return reason


def listed_rows(client: Client, filters: dict[str, Any]) -> list[tuple[int, list[Cell]]]:
    """Jobs outside arrays and arrays as one row each, newest first (an array is as new as
    its first task)."""
    alone = client.jobs(**filters, array_tasks=False)
    rows = [(job["id"], job_row(job)) for job in alone]
    for found in client.arrays(**filters):
        rows.append((found["id"], arrays.array_row(found, gpus_text(found["spec"]["resources"]))))
    return sorted(rows, key=lambda row: -row[0])


def job_row(job: dict[str, Any]) -> list[Cell]:
    """A job as one row of ``gpupool ls`` (cells of print_table)."""
    placement = job.get("placement") or {}
    return [
        arrays.task_id_text(job),
        visible(name_text(job)),
        visible(job["user"]),
        visible(job["team"]),
        status_cell(job["status"]),
        visible(request_text(job["spec"])),
        visible(nodes_text(placement)),
        age_text(job),
        visible(reason_text(job)),
    ]


def name_text(job: dict[str, Any]) -> str:
    """The job's name, and its kind when it is not a batch job: 'lab (notebook)'."""
    name, kind = job.get("name") or "-", job.get("kind") or "job"
    return name if kind == "job" else f"{name} ({kind})"


def nodes_text(placement: dict[str, Any]) -> str:
    """'n1' for a job on one node; 'n1+n2' for one over several."""
    tasks = placement.get("tasks") or ([placement] if placement else [])
    return "+".join(task["node"] for task in tasks) or "-"
