"""``gpupool metrics JOB``: what a job reported (and its GPUs' samples) as a table, JSON or CSV."""

from __future__ import annotations

import csv
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from gpupool.cli import arrays
from gpupool.cli.connection import connect
from gpupool.cli.output import escape, new_table, out, print_json

EMPTY = (
    "Job {job} has reported no metrics yet: a job reports them with gpupool.metrics.log(step=..., "
    "loss=...) or JSON lines in $GPUPOOL_METRICS_FILE."
)
CSV_COLUMNS = ("attempt", "name", "step", "time", "value")


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def metrics(
    target: Annotated[
        str,
        typer.Argument(
            metavar="JOB",
            help="The job id, or ID_INDEX for a task of a job array (12_7).",
            callback=arrays.check_target,
        ),
    ],
    output: Annotated[
        Format,
        typer.Option(
            "--output",
            "-o",
            help="table (each metric's last value, min, max and points), or every point as "
            "json or csv.",
            case_sensitive=False,
        ),
    ] = Format.TABLE,
    name: Annotated[
        list[str] | None,
        typer.Option("--name", "-n", help="Only this metric (repeat it for several)."),
    ] = None,
) -> None:
    """Show a job's metrics: each one's last value, min, max and points; -o json or csv for
    every point, per attempt (gpu.N.utilization and gpu.N.memory_used: its GPUs' samples)."""
    with connect() as client:
        job_id = arrays.job_id_of(client, target)
        if output == Format.TABLE:
            print_summary(job_id, client.metrics_summary(job_id, name))
            return
        series = client.all_metrics(job_id, name)
    if output == Format.JSON:
        print_json({"job_id": job_id, "series": series})
    else:
        write_csv(series)


def print_summary(job_id: int, summary: list[dict[str, Any]]) -> None:
    if not summary:
        out.print(escape(EMPTY.format(job=job_id)))
        return
    table = new_table("METRIC", "LAST", "MIN", "MAX", "POINTS")
    for row in summary:
        numbers = (number(row["last"]), number(row["min"]), number(row["max"]))
        table.add_row(escape(row["name"]), *numbers, str(row["points"]))
    out.print(table)


def write_csv(series: list[dict[str, Any]]) -> None:
    """One row per point: attempt, name, step (empty: none), time (epoch s), value."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for one in series:
        for step, at, value in zip(one["steps"], one["times"], one["values"], strict=True):
            writer.writerow((one["attempt"], one["name"], "" if step is None else step, at, value))


def number(value: float) -> str:
    """Short and exact enough to compare runs: 6 significant digits."""
    return f"{value:.6g}"
