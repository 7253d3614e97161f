"""Deployments: serve a registered model (or a command) with replicas behind the server.

gpupool deploy my-model:3 --replicas 2         # served at /serve/my-model/
gpupool deploy ls / show NAME / scale NAME 3 / update NAME --version 4 / stop NAME
gpupool deploy key create NAME / key ls NAME / key revoke NAME KEY_ID

A name is unique in its team: where several of your teams have a deployment of one name,
say which with --team (its address is then /serve/NAME@TEAM/).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from gpupool.cli.connection import connect
from gpupool.cli.options import OutputOption
from gpupool.cli.output import (
    CliError,
    Output,
    escape,
    new_table,
    out,
    print_json,
    timestamp,
)
from gpupool.domain.models import parse_reference

# What `gpupool deploy X ...` means when X is none of these: `gpupool deploy create X ...`.
SUB_COMMANDS = ("create", "ls", "show", "scale", "update", "stop", "key")


class DeployGroup(TyperGroup):
    """``gpupool deploy NAME[:VERSION] ...`` makes a deployment; ``gpupool deploy ls`` and the
    others act on them: an argument that names no sub-command is the ``create`` one's."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in SUB_COMMANDS and args[0] not in ("--help", "-h"):
            args = ["create", *args]
        return super().parse_args(ctx, args)


deploy_app = typer.Typer(
    help="Serve a registered model with replicas at /serve/NAME/: gpupool deploy NAME[:VERSION] "
    "--replicas 2; list, show, scale, update and stop deployments; their keys.",
    cls=DeployGroup,
    no_args_is_help=True,
)
key_app = typer.Typer(help="Keys that may call a deployment (for programs without a login).")
deploy_app.add_typer(key_app, name="key")
Name = Annotated[
    str, typer.Argument(help="The deployment's name, as 'gpupool deploy ls' lists it.")
]
Team = Annotated[
    str | None,
    typer.Option(help="Its team: needed where several of your teams have a deployment of NAME."),
]


@deploy_app.command("create", no_args_is_help=True)
def create(
    target: Annotated[
        str,
        typer.Argument(
            metavar="NAME[:VERSION]",
            help="A registered model, and its version (the latest when left out).",
        ),
    ],
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[-- CMD [ARGS]...]",
            help="What each replica runs (it must listen on $GPUPOOL_LISTEN_HOST:$PORT); "
            "without it, the built-in server serves model.pt (TorchScript) or model.onnx.",
        ),
    ] = None,
    replicas: Annotated[int, typer.Option(help="How many replicas serve it.", min=1)] = 1,
    gpus: Annotated[
        float | None, typer.Option(help="GPUs of each replica: 1, or a share such as 0.25.")
    ] = None,
    gpu_type: Annotated[
        list[str] | None,
        typer.Option("--gpu-type", help="A GPU model its replicas may run on (repeatable)."),
    ] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs of each replica (default 1).")] = None,
    memory: Annotated[
        str | None, typer.Option(help="Memory of each replica, such as 4GiB.")
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="The deployment's name, its address /serve/NAME/ (default: the model's)."
        ),
    ] = None,
    team: Annotated[str | None, typer.Option(help="The team of the model and deployment.")] = None,
    health_path: Annotated[
        str, typer.Option(help="What the server GETs on each replica: a 2xx answer is healthy.")
    ] = "/health",
    no_model: Annotated[
        bool,
        typer.Option(
            "--no-model", help="Serve the command alone: NAME is then the deployment's name."
        ),
    ] = False,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            "-e",
            help="NAME=VALUE for each replica (repeatable), or the Python environment its "
            "command runs in (NAME or NAME@ID: gpupool env ls).",
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Deploy a model: N replicas behind the server's proxy, health-checked and restarted.

    gpupool deploy my-model:3 --replicas 2, then call https://SERVER/serve/my-model/predict
    with your token (Authorization: Bearer ...) or a key (gpupool deploy key create my-model).
    With a command after --, each replica runs it (GPUPOOL_MODEL_DIR holds the model's files,
    read-only; it listens on $GPUPOOL_LISTEN_HOST:$PORT); --no-model deploys a command alone.
    """
    spec = _spec(target, command, no_model, name, team, replicas, health_path, env)
    resources = {"gpus": gpus, "cpus": cpus, "memory_bytes": memory}
    spec["resources"] = {k: v for k, v in resources.items() if v is not None}
    if gpu_type:
        spec["gpu_types"] = gpu_type
    with connect() as client:
        made = client.deploy(spec)
    if output == Output.JSON:
        print_json(made)
        return
    out.print(f"deployment {escape(made['name'])}: {made['replicas']} replica(s) starting")
    out.print(f"served at {escape(made['url'])} (gpupool deploy show {escape(made['name'])})")


@deploy_app.command("ls")
def ls(
    team: Annotated[str | None, typer.Option(help="Only this team's.")] = None,
    stopped: Annotated[bool, typer.Option("--stopped", help="The stopped ones too.")] = False,
    output: OutputOption = Output.TABLE,
) -> None:
    """List deployments: model and version, replicas ready, state, address."""
    with connect() as client:
        found = client.deployments(team, stopped)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("NAME", "TEAM", "MODEL", "READY", "STATE", "ADDRESS", "UPDATED")
    for d in found:
        table.add_row(
            escape(d["name"]),
            escape(d["team"]),
            escape(_model(d)),
            f"{d['ready']}/{d['replicas']}",
            d["state"],
            escape(d["url"]),
            timestamp(d["updated_at"]),
        )
    out.print(table)


@deploy_app.command("show")
def show(name: Name, team: Team = None, output: OutputOption = Output.TABLE) -> None:
    """Show a deployment: its replicas (node, state, health, restarts, why one waits),
    traffic and events."""
    with connect() as client:
        found = client.deployment(name, team)
    if output == Output.JSON:
        print_json(found)
        return
    _print(found)


@deploy_app.command("scale")
def scale(
    name: Name,
    replicas: Annotated[int, typer.Argument(help="How many replicas to serve it.", min=1)],
    team: Team = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Change how many replicas serve a deployment."""
    with connect() as client:
        scaled = client.scale_deployment(name, replicas, team)
    _done(scaled, output, f"scaling to {replicas} replicas")


@deploy_app.command("update")
def update(
    target: Annotated[
        str, typer.Argument(metavar="NAME[:VERSION]", help="The deployment (and the version).")
    ],
    version: Annotated[
        int | None, typer.Option(help="The model's version to serve (default: the latest).")
    ] = None,
    team: Team = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Roll a deployment to another version of its model, one replica at a time.

    A new replica starts first; an old one is retired only once the new one is healthy, so
    the deployment always has a healthy replica. A version that never gets healthy stops the
    roll, and the old version keeps serving ('gpupool deploy show' says why).
    """
    name, _, after = target.partition(":")
    if after:
        if not after.isdigit() or version is not None:
            raise CliError("bad_version", "give the version once: NAME:VERSION or --version N")
        version = int(after)
    with connect() as client:
        updated = client.update_deployment(name, version, team)
        _done(updated, output, f"rolling to version {updated['version']}")


@deploy_app.command("stop")
def stop(name: Name, team: Team = None, output: OutputOption = Output.TABLE) -> None:
    """Stop a deployment: no more requests, its replicas stop, its name is free again."""
    with connect() as client:
        _done(client.stop_deployment(name, team), output, "stopped")


@key_app.command("create")
def key_create(
    name: Name,
    key_name: Annotated[str, typer.Option("--name", help="What the key is for.")] = "key",
    team: Team = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Make a key that may call the deployment; it is printed once: keep it now."""
    with connect() as client:
        made = client.create_deployment_key(name, key_name, team)
        if output == Output.JSON:
            print_json(made)
            return
        url = client.deployment(name, team)["url"]  # NAME@TEAM where your teams share NAME
    out.print(made["key"], soft_wrap=True)
    out.print(
        f"key {made['id']} of {escape(name)}: send it as 'Authorization: Bearer <key>' to "
        f"{escape(url)} (it is not shown again)",
        style="dim",
    )


@key_app.command("ls")
def key_ls(name: Name, team: Team = None, output: OutputOption = Output.TABLE) -> None:
    """List a deployment's keys (their first characters, never the keys)."""
    with connect() as client:
        found = client.deployment_keys(name, team)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("ID", "NAME", "PREFIX", "CREATED", "BY", "REVOKED")
    for key in found:
        table.add_row(
            str(key["id"]),
            escape(key["name"]),
            escape(key["prefix"]),
            timestamp(key["created_at"]),
            escape(key["created_by"]),
            "yes" if key["revoked"] else "",
        )
    out.print(table)


@key_app.command("revoke")
def key_revoke(
    name: Name,
    key_id: Annotated[
        int, typer.Argument(help="The key's id, as 'gpupool deploy key ls' lists it.")
    ],
    team: Team = None,
) -> None:
    """Revoke a key: it stops working at once."""
    with connect() as client:
        client.revoke_deployment_key(name, key_id, team)
    out.print(f"key {key_id} of {escape(name)} revoked")


# -- helpers -----------------------------------------------------------------------------------


def _spec(
    target: str,
    command: list[str] | None,
    no_model: bool,
    name: str | None,
    team: str | None,
    replicas: int,
    health_path: str,
    env: list[str] | None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "health_path": health_path, "team": team}
    if no_model:
        if not command:
            raise CliError("no_command", "--no-model deploys a command: give it after --")
        spec |= {"name": name or target, "command": command}
    else:
        try:
            model, version = parse_reference(target)
        except ValueError as error:
            raise CliError("bad_model", str(error)) from None
        spec |= {"model": model, "version": version, "name": name, "command": command or None}
    variables = [item for item in env or [] if "=" in item]
    environments = [item for item in env or [] if "=" not in item]
    if len(environments) > 1:
        raise CliError("bad_env", f"replicas run in one environment: not {environments}")
    spec["env"] = dict(_pair(item) for item in variables)
    spec["environment"] = environments[0] if environments else None
    return {k: v for k, v in spec.items() if v is not None}


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise CliError("bad_env", f"--env takes NAME=VALUE, not {item!r}")
    return key, value


def _model(deployment: dict[str, Any]) -> str:
    if not deployment.get("model"):
        return "-"
    return f"{deployment['model']}:{deployment['version']}"


def _done(deployment: dict[str, Any], output: Output, what: str) -> None:
    if output == Output.JSON:
        print_json(deployment)
        return
    out.print(f"deployment {escape(deployment['name'])}: {what}")


def _print(d: dict[str, Any]) -> None:
    rolling = (
        f" (rolling from version {d['rolling_from_version']})" if d["rolling_from_version"] else ""
    )
    out.print(f"[bold]{escape(d['name'])}[/bold]  team {escape(d['team'])}  {d['state']}{rolling}")
    out.print(f"model {escape(_model(d))}  address {escape(d['url'])}")
    out.print(f"replicas {d['ready']} ready of {d['replicas']}")
    traffic = d["traffic"]
    if traffic["requests"]:
        out.print(
            f"requests {traffic['requests']} ({traffic['errors']} failed)  latency p50 "
            f"{traffic['p50_ms']} ms, p99 {traffic['p99_ms']} ms"
        )
    if d.get("message"):
        out.print(f"last: {escape(d['message'])}", soft_wrap=True)
    table = new_table("REPLICA", "VERSION", "JOB", "NODE", "STATE", "RESTARTS", "FAILED CHECKS")
    for r in d["replica_list"]:
        table.add_row(
            str(r["id"]),
            str(r["version"] if r["version"] is not None else "-"),
            str(r["job_id"] or "-"),
            escape(r["node"] or "-"),
            r["state"] + (f" ({r['waiting_reason']})" if r.get("waiting_reason") else ""),
            str(r["restarts"]),
            str(r["failures"]),
        )
    out.print(table)
    for r in d["replica_list"]:
        if r.get("waiting_reason"):
            out.print(
                f"replica {r['id']} waits: {r['waiting_reason']}: "
                f"{escape(r['waiting_message'] or '')} (gpupool why {r['job_id']})",
                soft_wrap=True,
            )
    for event in d["events"][-10:]:
        out.print(
            f"{timestamp(event['at'])}  {event['reason']}  {escape(event['message'])}",
            soft_wrap=True,
        )
