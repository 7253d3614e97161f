"""Holding jobs: hold (a pending job never starts) and release (back to the queue), as
Slurm's scontrol hold and release."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from gpupool.cli import arrays
from gpupool.cli.connection import connect
from gpupool.cli.output import escape, out, report_error
from gpupool.client import ApiError, Client

TARGETS_HELP = "Job ids, or ID_INDEX for a task of a job array (12_7)."


def hold(
    targets: Annotated[
        list[str],
        typer.Argument(metavar="JOB...", help=TARGETS_HELP, callback=arrays.check_targets),
    ],
) -> None:
    """Hold pending jobs: they wait (reason Held) and never start until released."""
    _each(targets, Client.hold)


def release(
    targets: Annotated[
        list[str],
        typer.Argument(metavar="JOB...", help=TARGETS_HELP, callback=arrays.check_targets),
    ],
) -> None:
    """Release held jobs: back to the queue (gpupool run --hold, gpupool hold)."""
    _each(targets, Client.release)


def _each(targets: list[str], act: Callable[[Client, int], dict[str, Any]]) -> None:
    """Act on every target, say what became of each; exit 1 when one failed."""
    failed = False
    with connect() as client:
        for target in targets:
            try:
                job = act(client, arrays.job_id_of(client, target))
            except ApiError as error:
                report_error(error.code, error.message)
                failed = True
                continue
            out.print(escape(f"{arrays.label_of(job)}: {job['reason']}: {job['message']}"))
    if failed:
        raise typer.Exit(1)
