"""The scheduler's live settings: show them, change knobs (admins), read their history and roll
back to any version. Durations take units (90, 30m, 2h, 1d); the LAS levels are GPU-time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from gpupool.cli import tuning
from gpupool.cli.connection import connect
from gpupool.cli.options import OutputOption
from gpupool.cli.output import Output, escape, new_table, out, print_json, timestamp
from gpupool.domain.schedsettings import KNOB_HELP, KNOBS, knob_text
from gpupool.domain.units import parse_duration

scheduler_app = typer.Typer(
    help="The scheduler's live settings (LAS levels, starvation, minimum runtime, fair-share "
    "half-life, packing, order): show them; admins change them, read their history, roll "
    "back, and tune them by replaying the pool's own history.",
    no_args_is_help=True,
)
Reason = Annotated[
    str, typer.Option("--reason", help="Why: kept with the version, shown by history.")
]
IfVersion = Annotated[
    int | None,
    typer.Option(
        "--if-version",
        metavar="N",
        help="Refuse unless version N is still the live one (another admin's change wins).",
    ),
]


def _threshold_list(text: str) -> list[float]:
    return [parse_duration(part.strip()) for part in text.split(",") if part.strip()]


PARSERS: dict[str, Callable[[str], Any]] = {
    "las_thresholds": _threshold_list,
    "min_runtime": parse_duration,
    "starvation_factor": float,
    "starvation_min_wait": parse_duration,
    "usage_half_life": parse_duration,
    "placement_charge": parse_duration,
    "packing": str,
    "order": str,
}


def parse_knobs(values: list[str]) -> dict[str, Any]:
    """KNOB=VALUE pairs as the API's knobs (a usage error names a wrong one)."""
    knobs: dict[str, Any] = {}
    for pair in values:
        name, sep, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in PARSERS:
            raise typer.BadParameter(
                f"'{pair}' is no KNOB=VALUE of the knobs {', '.join(PARSERS)}", param_hint="KNOB"
            )
        try:
            knobs[name] = PARSERS[name](text.strip())
        except ValueError as error:
            raise typer.BadParameter(f"{name}: {error}", param_hint="KNOB") from None
    return knobs


@scheduler_app.command("config")
def config(output: OutputOption = Output.TABLE) -> None:
    """Show the live settings: their version, each knob's value and the environment's."""
    with connect() as client:
        shown = client.scheduler_config()
    if output == Output.JSON:
        print_json(shown)
        return
    _print_config(shown)


@scheduler_app.command("set")
def set_knobs(
    pairs: Annotated[
        list[str],
        typer.Argument(
            metavar="KNOB=VALUE...",
            help="e.g. las_thresholds=1h,20h,200h min_runtime=10m starvation_factor=4 "
            "packing=best-fit.",
        ),
    ],
    reason: Reason,
    if_version: IfVersion = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Change knobs (admins): a new version; the next scheduling cycle uses it."""
    knobs = parse_knobs(pairs)
    with connect() as client:
        shown = client.change_scheduler_config(knobs, reason, if_version)
    _said(shown, output)


@scheduler_app.command("history")
def history(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="The newest N versions.")] = 100,
    output: OutputOption = Output.TABLE,
) -> None:
    """The versions, newest first: what each changed, who, when, why, and how (admins)."""
    with connect() as client:
        found = client.scheduler_history(limit)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("VERSION", "WHEN", "BY", "SOURCE", "CHANGED", "REASON")
    for one in found:
        source = one["source"]
        if one.get("rollback_of") is not None:
            source = f"{source} to {one['rollback_of']}"
        changed = ", ".join(f"{n}={knob_text(n, one['knobs'][n])}" for n in one["changed"])
        table.add_row(
            str(one["version"]),
            timestamp(one["created_at"]),
            escape(one["created_by"] or "-"),
            source,
            escape(changed or "-"),
            escape(one["reason"]),
        )
    out.print(table)


@scheduler_app.command("rollback")
def rollback(
    version: Annotated[
        int,
        typer.Argument(
            metavar="VER", min=0, help="The version to go back to (0: the environment's)."
        ),
    ],
    reason: Reason,
    if_version: IfVersion = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Go back to an earlier version's knobs (admins), as a new version."""
    with connect() as client:
        shown = client.rollback_scheduler_config(version, reason, if_version)
    _said(shown, output)


def _said(shown: dict[str, Any], output: Output) -> None:
    if output == Output.JSON:
        print_json(shown)
        return
    _print_config(shown)


def _print_config(shown: dict[str, Any]) -> None:
    live = shown["live"]
    if live is None:
        out.print("version 0: the server's environment (GPUPOOL_*); no admin changed them yet")
    else:
        by = escape(live["created_by"] or live["source"])
        when = timestamp(live["created_at"])
        out.print(escape(f"version {shown['version']} ({live['source']}, by {by} at {when})"))
        out.print(escape(f"changed: {', '.join(live['changed'])}; why: {live['reason']}"))
    table = new_table("KNOB", "VALUE", "ENVIRONMENT", "WHAT IT DOES")
    for name in KNOBS:
        value, environment = shown["knobs"][name], shown["environment"][name]
        table.add_row(
            name,
            escape(knob_text(name, value)),
            "same" if value == environment else escape(knob_text(name, environment)),
            KNOB_HELP[name],
        )
    out.print(table)


scheduler_app.command("tune")(tuning.tune)
scheduler_app.command("tunes")(tuning.tunes)
scheduler_app.command("fidelity")(tuning.fidelity)
