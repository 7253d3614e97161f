"""Queue: the pending jobs of each team, in queue order, with why they wait and when they start."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect
from gpupool.cli.listing import gpus_text
from gpupool.cli.options import OutputOption
from gpupool.cli.output import Output, duration, escape, new_table, out, print_json

MAX_MESSAGE = 60  # characters of a reason message shown; `gpupool why JOB` shows all of it
EMPTY = "No job is waiting: every job submitted so far has started or ended."
GUIDE = (
    "Each team has its own queue: position 1 is the next job of that team to start.",
    "ETA is an estimated start, not a promise; `gpupool why JOB` explains one job.",
)


def queue(
    team: Annotated[str | None, typer.Option(help="Only this team's queue.")] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show the jobs waiting for GPUs, team by team, in queue order, with estimated starts."""
    with connect() as client:
        found = client.queue()
    if team is not None:
        found["teams"] = [t for t in found["teams"] if t["team"] == team]
    if output == Output.JSON:
        print_json(found)
        return
    if not found["teams"]:
        out.print(EMPTY if team is None else f"No job of team {escape(team)} is waiting.")
        return
    out.print(escape(summary_text(found, team)))
    for line in GUIDE:
        out.print(escape(line))
    for entry in found["teams"]:
        out.print("")
        print_team(entry)


def summary_text(found: dict[str, Any], team: str | None) -> str:
    """'3 jobs waiting in 2 teams' (with a note when the server listed only the first ones)."""
    shown = sum(len(t["jobs"]) for t in found["teams"])
    if team is not None:
        return f"{_jobs(shown)} of team {team} waiting"
    teams = len(found["teams"])
    text = f"{_jobs(found['waiting'])} waiting in {teams} team{'' if teams == 1 else 's'}"
    if shown < found["waiting"]:
        text += f" (the first {shown} in queue order are shown)"
    return text


def print_team(entry: dict[str, Any]) -> None:
    """A header line for the team, then its jobs in queue order."""
    out.print(f"[bold]team {escape(entry['team'])}[/bold]: {len(entry['jobs'])} waiting")
    table = new_table("POS", "ID", "NAME", "USER", "GPUS", "REASON", "MESSAGE", "ETA")
    for job in entry["jobs"]:
        table.add_row(
            str(job["position"] or "-"),
            str(job["id"]),
            escape(job.get("name") or "-"),
            escape(job["user"]),
            gpus_text(job),
            escape(job["code"]),
            escape(short(job["message"]) or "-"),
            relative_eta(job.get("eta"), job.get("eta_unknown")),
        )
    out.print(table)
    for line in unknown_lines(entry["jobs"]):
        out.print(escape(line))


def unknown_lines(jobs: list[dict[str, Any]]) -> list[str]:
    """Why the jobs without an estimate have none, one line per reason."""
    by_reason: dict[str, list[str]] = {}
    for job in jobs:
        if job.get("eta") is None and job.get("eta_unknown"):
            by_reason.setdefault(job["eta_unknown"], []).append(str(job["id"]))
    return [
        f"ETA unknown for job{'' if len(ids) == 1 else 's'} {', '.join(ids)}: {reason}"
        for reason, ids in by_reason.items()
    ]


def short(text: str, room: int = MAX_MESSAGE) -> str:
    """The text on one line, cut to ``room`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= room else line[: room - 1] + "…"


def relative_eta(at: float | None, unknown: str | None = None) -> str:
    """'in 12m05s', 'now', 'unknown' (the lines under the table say why), or '-' when there
    is no estimate and no reason either."""
    if at is None:
        return "unknown" if unknown else "-"
    left = at - time.time()
    return "now" if left < 1 else f"in {duration(left)}"


def _jobs(count: int) -> str:
    return f"{count} job{'' if count == 1 else 's'}"
