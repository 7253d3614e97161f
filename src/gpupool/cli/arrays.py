"""Job arrays in the CLI: task addresses (``12_7``), an array as one row of ``gpupool ls``,
cancelling a whole array. Indexes are checked by the server (one place says what it takes)."""

from __future__ import annotations

import re
from typing import Any

from gpupool.cli.output import age, visible
from gpupool.client import Client

ADDRESS = re.compile(r"^\s*(\d{1,10})(?:_(\d{1,10}))?\s*$")
# the order in which an array's counts are shown: its tasks' lifecycle
STATUS_ORDER = ("pending", "starting", "running", "succeeded", "failed", "cancelled", "lost")
LIVE = ("pending", "starting", "running")


def parse_target(text: str) -> tuple[int, int | None]:
    """``'12'`` -> (12, None), a job (or an array: its first task's id); ``'12_7'`` -> (12,
    7), the task of index 7 of array 12. Anything else is a usage error (exit 2)."""
    found = ADDRESS.match(text)
    if not found:
        from typer import BadParameter  # here: `gpupool ls` loads this module without Typer

        raise BadParameter(f"'{text}' is neither a job id (12) nor a task of a job array (12_7)")
    index = found.group(2)
    return int(found.group(1)), None if index is None else int(index)


def check_target(value: str) -> str:
    """A Typer callback: one job id or task address."""
    parse_target(value)
    return value


def check_targets(values: list[str]) -> list[str]:
    for value in values:
        parse_target(value)
    return values


def job_id_of(client: Client, target: str) -> int:
    """The job a target names: a job id as it is; ``ID_INDEX``, that task of the array."""
    number, index = parse_target(target)
    if index is None:
        return number
    return client.array_task(number, index)["id"]


def label_of(job: dict[str, Any]) -> str:
    """How to name a job: 'task 12_7 (job 19)' for a task of an array, whether it was asked
    for by its address or by its job id; 'job 19' otherwise."""
    if job.get("array_id") is None:
        return f"job {job['id']}"
    return f"task {task_id_text(job)} (job {job['id']})"


def cancel_target(client: Client, target: str) -> str:
    """Cancel what ``target`` names and say what became of it: ``ID_INDEX`` one task; the id
    of an array (its first task's, as Slurm's scancel takes it) every task not ended."""
    number, index = parse_target(target)
    if index is not None:
        job = client.cancel(client.array_task(number, index)["id"])
        return f"task {target}: {_done(job)}"
    job = client.job(number)
    if job.get("array_id") == job["id"]:
        return array_cancelled(client.cancel_array(number))
    return f"job {number}: {_done(client.cancel(number))}"


def array_cancelled(array: dict[str, Any]) -> str:
    """'array 12: 950 tasks cancelled, 50 stopping'."""
    counts = array["counts"]
    stopping = sum(counts.get(status, 0) for status in LIVE)
    said = f"array {array['id']}: {_tasks(counts.get('cancelled', 0))} cancelled"
    return said + (f", {stopping} stopping" if stopping else "")


def array_id_text(array: dict[str, Any]) -> str:
    """'12_[0-999%50]': the array and its indexes as squeue shows them."""
    limit = f"%{array['max_running']}" if array.get("max_running") else ""
    return f"{array['id']}_[{array['indexes']}{limit}]"


def task_id_text(job: dict[str, Any]) -> str:
    """'12_7' for a task of an array, the job id otherwise."""
    if job.get("array_id") is None:
        return str(job["id"])
    return f"{job['array_id']}_{job['array_index']}"


def counts_text(counts: dict[str, int]) -> str:
    """'950 pending, 50 running' in the order of a task's life."""
    ordered = [status for status in STATUS_ORDER if counts.get(status)]
    return ", ".join(f"{counts[status]} {status}" for status in ordered)


def array_row(array: dict[str, Any], gpus: str) -> list[str]:
    """An array as one row of ``gpupool ls`` (``gpus``: what each task asks for), in cells
    of gpupool.cli.output.print_table."""
    return [
        visible(array_id_text(array)),
        visible(array.get("name") or "-"),
        visible(array["user"]),
        visible(array["team"]),
        visible(counts_text(array["counts"])),
        gpus,
        "-",
        age(array["submitted_at"]),
        f"array of {_tasks(array['size'])} (ls --array {array['id']})",
    ]


def _done(job: dict[str, Any]) -> str:
    return "cancelled" if job["status"] == "cancelled" else "cancel requested"


def _tasks(count: int) -> str:
    return f"{count} task{'' if count == 1 else 's'}"
