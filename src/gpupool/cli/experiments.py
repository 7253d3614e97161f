"""Experiments: hyper-parameter searches whose trials are jobs. Make one with ``gpupool
apply -f`` of a document of kind Experiment; list, show, steer and read the best here."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect
from gpupool.cli.options import OutputOption
from gpupool.cli.output import Output, escape, new_table, out, print_json

experiment_app = typer.Typer(
    help="Experiments: hyper-parameter searches whose trials are jobs (made with gpupool "
    "apply -f of a kind Experiment); list, show, pause, resume, stop, best.",
    no_args_is_help=True,
)
Ref = Annotated[str, typer.Argument(help="The experiment's id, or its name.")]


@experiment_app.command("ls")
def ls(
    all_: Annotated[bool, typer.Option("--all/--active", help="Ended ones too.")] = True,
    output: OutputOption = Output.TABLE,
) -> None:
    """List your teams' experiments, newest first."""
    with connect() as client:
        found = client.experiments(all_)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("ID", "NAME", "TEAM", "STATUS", "TRIALS", "BEST", "OBJECTIVE")
    for one in found:
        table.add_row(
            str(one["id"]),
            escape(one["name"]),
            escape(one["team"]),
            one["status"],
            _counts(one),
            _best(one),
            escape(_objective(one)),
        )
    out.print(table)


@experiment_app.command("show")
def show(ref: Ref, output: OutputOption = Output.TABLE) -> None:
    """Show an experiment and its trials: each one's point, state, rung and objective."""
    with connect() as client:
        found = client.experiment(ref)
    if output == Output.JSON:
        print_json(found)
        return
    head = f"experiment {found['id']} {found['name']} ({found['team']}): {found['status']}"
    out.print(escape(f"{head} — {found['message'] or ''}"))
    how = f"sampler {found['sampler']}, stopping {found['stopping']}"
    out.print(escape(f"objective: {_objective(found)}; {how}"))
    out.print(escape(f"trials: {_counts(found)}; best: {_best(found)}"))
    names = sorted({name for t in found["trial_list"] for name in t["params"]})
    table = new_table("TRIAL", "JOB", "STATE", *[n.upper() for n in names], "RUNG", "VALUE")
    for trial in found["trial_list"]:
        table.add_row(
            str(trial["number"]),
            str(trial["job_id"] or "-"),
            trial["state"],
            *[escape(_value(trial["params"].get(n))) for n in names],
            "-" if trial["rung"] is None else str(trial["rung"]),
            _value(trial["value"]),
        )
    out.print(table)


@experiment_app.command("best")
def best(ref: Ref, output: OutputOption = Output.TABLE) -> None:
    """The completed trial with the best objective: its number, job, value and point."""
    with connect() as client:
        found = client.experiment(ref)
    chosen = found["best"]
    if output == Output.JSON:
        print_json(chosen)
        return
    if chosen is None:
        out.print(escape(f"experiment {found['name']} has no completed trial yet"))
        raise typer.Exit(1)
    point = ", ".join(f"{k}={_value(v)}" for k, v in sorted(chosen["params"].items()))
    metric = found["objective"]["metric"]
    said = f"{metric} {_value(chosen['value'])} at {point}"
    out.print(escape(f"trial {chosen['trial']} (job {chosen['job_id']}): {said}"))


def _steer(action: str, ref: str, output: Output) -> None:
    with connect() as client:
        found = client.steer_experiment(ref, action)
    if output == Output.JSON:
        print_json(found)
        return
    out.print(escape(f"experiment {found['name']}: {found['status']} ({found['message']})"))


@experiment_app.command("pause")
def pause(ref: Ref, output: OutputOption = Output.TABLE) -> None:
    """Start no new trials; the running ones go on and are still judged."""
    _steer("pause", ref, output)


@experiment_app.command("resume")
def resume(ref: Ref, output: OutputOption = Output.TABLE) -> None:
    """Start trials again."""
    _steer("resume", ref, output)


@experiment_app.command("stop")
def stop(ref: Ref, output: OutputOption = Output.TABLE) -> None:
    """End the experiment: its trials that have not ended are cancelled."""
    _steer("stop", ref, output)


def _counts(one: dict[str, Any]) -> str:
    made = sum(one["trials"].values())
    parts = [f"{n} {state.replace('_', ' ')}" for state, n in one["trials"].items() if n]
    return f"{made}/{one['max_trials']}" + (f" ({', '.join(parts)})" if parts else "")


def _best(one: dict[str, Any]) -> str:
    chosen = one["best"]
    return "-" if chosen is None else f"{_value(chosen['value'])} (trial {chosen['trial']})"


def _objective(one: dict[str, Any]) -> str:
    objective = one["objective"]
    goal = f", goal {objective['goal']:g}" if objective.get("goal") is not None else ""
    return f"{objective['direction']} {objective['metric']}{goal}"


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
