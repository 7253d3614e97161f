"""Self-tuning from the shell: the pool's history exported as the simulator's CSV, how well a
replay reproduces it (fidelity), and tunings of the scheduler's settings (admins): asked,
followed to their end, their reports read."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect
from gpupool.cli.options import OutputOption
from gpupool.cli.output import Output, duration, escape, new_table, out, print_json, timestamp
from gpupool.domain.schedsettings import knob_text
from gpupool.domain.units import parse_duration

history_app = typer.Typer(
    help="The pool's history (admins): export it as a trace that gpupool simulate and the "
    "tuner replay.",
    no_args_is_help=True,
)
GUARDS = ("p95_wait", "worst_team_slowdown")
POLL_SECONDS = 1.0


def _seconds(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


Since = Annotated[
    str, typer.Option("--since", help="How far back: 90m, 36h, 14d.", metavar="DURATION")
]


@history_app.command("export")
def export(
    since: Since = "14d",
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the CSV here (default: stdout).")
    ] = None,
) -> None:
    """Export the jobs that ran as the simulator's CSV (submit, run time, GPUs, team, user,
    needs; censored 1 for a job still running, its observed JCT for one that ended)."""
    with connect() as client:
        text = client.history_trace(_seconds(since))
    if output is None:
        typer.echo(text, nl=False)
        return
    output.write_text(text)
    rows = max(0, text.count("\n") - 1)
    out.print(escape(f"{rows} jobs written to {output}"))


def parse_guards(values: list[str] | None) -> dict[str, float] | None:
    """'p95_wait=10%,worst_team_slowdown=0.2' -> shares; a usage error names a wrong one."""
    if not values:
        return None
    guards: dict[str, float] = {}
    for pair in ",".join(values).split(","):
        name, _, text = pair.strip().partition("=")
        if name not in GUARDS or not text:
            raise typer.BadParameter(
                f"'{pair}': give NAME=SHARE with NAME one of {', '.join(GUARDS)} (10% or 0.1)"
            )
        try:
            share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise typer.BadParameter(f"'{pair}': the share is a number, 10% or 0.1") from None
        guards[name] = share
    return guards


def tune(
    window: Annotated[
        str, typer.Option(help="History to replay, back from now (the last part held out).")
    ] = "14d",
    holdout: Annotated[
        str, typer.Option(help="The last part of the window, kept to check the best few.")
    ] = "7d",
    trials: Annotated[int, typer.Option(min=1, max=1000, help="Settings to try.")] = 60,
    objective: Annotated[
        str, typer.Option(help="avg_jct, median_jct, p95_jct or avg_wait: what to lower.")
    ] = "avg_jct",
    guard: Annotated[
        list[str] | None,
        typer.Option(
            help="The most a figure may rise on the hold-out: p95_wait=10%,"
            "worst_team_slowdown=10% (the defaults).",
            metavar="NAME=SHARE",
        ),
    ] = None,
    sampler: Annotated[str, typer.Option(help="tpe, or grid (exhaustive).")] = "tpe",
    seed: Annotated[int, typer.Option(min=0, help="The search's seed.")] = 0,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply/--dry-run",
            help="Adopt the chosen settings (a new version) when the hold-out improves by 5 % "
            "with no guard broken; --dry-run (the default) only reports.",
        ),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow it to its end and print its report.")
    ] = True,
    output: OutputOption = Output.TABLE,
) -> None:
    """Tune the scheduler's settings by replaying the pool's own history (admins)."""
    options = {
        "window": _seconds(window), "holdout": _seconds(holdout), "trials": trials,
        "objective": objective, "guards": parse_guards(guard), "sampler": sampler,
        "seed": seed, "apply": apply,
    }  # fmt: skip
    with connect() as client:
        shown = client.request_tune(options)
        if wait:
            if output == Output.TABLE:
                out.print(f"tuning {shown['id']} queued; replaying the history...")
            while shown["status"] in ("queued", "running"):
                time.sleep(POLL_SECONDS)
                shown = client.tune(shown["id"])
    _show(shown, output)


def tunes(
    tune_id: Annotated[
        int | None, typer.Argument(metavar="[ID]", help="One tuning, with its report.")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """The tunings, newest first, or one tuning's report (admins)."""
    with connect() as client:
        if tune_id is not None:
            _show(client.tune(tune_id), output)
            return
        found = client.tunes()
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("ID", "ASKED", "BY", "STATUS", "DECISION", "VERSION", "WHY")
    for one in found:
        table.add_row(
            str(one["id"]), timestamp(one["created_at"]),
            escape(one["requested_by"] or one["source"]), one["status"],
            one["decision"] or "-", str(one["adopted_version"] or "-"),
            escape(one["message"] or ""),
        )  # fmt: skip
    out.print(table)


def fidelity(since: Since = "1d", output: OutputOption = Output.TABLE) -> None:
    """Replay the recent history under the live settings against what happened (admins)."""
    with connect() as client:
        found = client.fidelity(_seconds(since))
    if output == Output.JSON:
        print_json(found)
        return
    verdict = "trusted" if found["trusted"] else "NOT trusted: tuning is refused"
    out.print(
        escape(
            f"{found['jobs']} jobs that ended compared: median JCT error "
            f"{_share(found['median_error'])}, p90 {_share(found['p90_error'])} "
            f"({verdict}; the limit is {_share(found['limit'])})"
        )
    )
    table = new_table("JOB", "REAL JCT", "REPLAYED", "ERROR")
    for one in found["worst"]:
        table.add_row(
            str(one["job_id"]), duration(one["observed"]), duration(one["replayed"]),
            _share(one["error"]),
        )  # fmt: skip
    out.print(table)


def _show(shown: dict[str, Any], output: Output) -> None:
    if output == Output.JSON:
        print_json(shown)
        return
    head = f"tuning {shown['id']}: {shown['status']}"
    if shown["decision"]:
        head += f", {shown['decision']}"
    if shown["adopted_version"]:
        head += f": version {shown['adopted_version']} is live"
    out.print(escape(head))
    if shown["message"]:
        out.print(escape(shown["message"]))
    report = shown.get("report")
    if not report:
        return
    jobs = report.get("jobs", {})
    out.print(
        escape(
            f"{len(report['trials'])} settings tried on {jobs.get('window', '?')} jobs, the best "
            f"{len(report['rescored'])} re-scored on {jobs.get('holdout', '?')} held-out jobs "
            f"({report['replays']} replays, {report['seconds']:.0f} s)"
        )
    )
    table = new_table("TRIAL", "SETTINGS (vs the live ones)", report["objective"], "GAIN", "GUARDS")
    for one in report["rescored"]:
        table.add_row(
            str(one["number"]), escape(_changed(one["knobs"], report["base"])),
            duration(one["holdout"][report["objective"]]), _share(one["improvement"]),
            escape(", ".join(f"{k} {_signed(v)}" for k, v in one["guards"].items())),
        )  # fmt: skip
    out.print(table)


def _changed(knobs: dict[str, Any], base: dict[str, Any]) -> str:
    changed = [f"{k}={knob_text(k, v)}" for k, v in knobs.items() if base.get(k) != v]
    return "; ".join(changed) or "the same"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _signed(value: float) -> str:
    return f"{value * 100:+.1f} %"
