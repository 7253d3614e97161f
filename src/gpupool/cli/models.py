"""The model registry: register a job's outputs as a new version of a model, list models,
show a model's versions or one version's files, source job and metrics."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect, read_config
from gpupool.cli.options import OutputOption
from gpupool.cli.output import (
    CliError,
    Output,
    escape,
    memory,
    new_table,
    out,
    print_json,
    timestamp,
)
from gpupool.client import Client

model_app = typer.Typer(
    help="The model registry: versions of your teams' models, registered from jobs' outputs.",
    no_args_is_help=True,
)
REGISTER_TIMEOUT_S = 3600.0
TeamOption = Annotated[
    str | None, typer.Option("--team", help="The model's team, when several of yours have one.")
]


@model_app.command("register")
def register(
    name: Annotated[str, typer.Argument(help="The model's name (letters, digits, . _ -).")],
    from_job: Annotated[
        int, typer.Option("--from-job", "-j", help="The job whose outputs the version holds.")
    ],
    path: Annotated[
        str | None,
        typer.Option("--path", "-p", help="A file or directory inside the job's outputs."),
    ] = None,
    team: Annotated[
        str | None, typer.Option("--team", help="The job's team (a check: it is the model's).")
    ] = None,
    description: Annotated[
        str | None, typer.Option("--description", "-d", help="What this version is.")
    ] = None,
    allow_failed: Annotated[
        bool,
        typer.Option("--allow-failed", help="Take what a job that did not succeed left."),
    ] = False,
    output: OutputOption = Output.TABLE,
) -> None:
    """Record a new version of a model from what a job wrote to $GPUPOOL_OUTPUT_DIR.

    The files are copied into the server's model store with their SHA-256; the job, its spec
    and its final metrics are remembered. The job must have ended, and succeeded unless
    --allow-failed. Versions are numbered 1, 2, 3 ... per model; the model belongs to the
    job's team.
    """
    config = read_config()
    # the server answers once the files are copied: a large model takes a while
    client = Client(config.url, config.token, timeout=REGISTER_TIMEOUT_S)
    try:
        found = client.register_model(
            name,
            from_job,
            path=path,
            team=team,
            description=description,
            allow_failed=allow_failed or None,
        )
    finally:
        client.close()
    if output == Output.JSON:
        print_json(found)
        return
    said = (
        f"registered {found['name']}:{found['version']} (team {found['team']}) from job "
        f"{found['source_job_id']}: {len(found['files'])} files, {memory(found['size_bytes'])}"
    )
    out.print(escape(said))


@model_app.command("ls")
def ls(team: TeamOption = None, output: OutputOption = Output.TABLE) -> None:
    """List the models of your teams, with their latest version."""
    with connect() as client:
        found = client.models(team)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("NAME", "TEAM", "LATEST", "VERSIONS", "UPDATED")
    for model in found:
        table.add_row(
            escape(model["name"]),
            escape(model["team"]),
            str(model["latest_version"]),
            str(model["version_count"]),
            timestamp(model["updated_at"]),
        )
    out.print(table)


@model_app.command("show")
def show(
    reference: Annotated[
        str, typer.Argument(metavar="NAME[:VERSION]", help="A model, or one of its versions.")
    ],
    team: TeamOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show a model's versions and its latest version (or the version named): source job,
    metrics, and files with sizes and checksums."""
    name, version = parse_reference(reference)
    with connect() as client:
        model = client.model(name, team) if version is None else None
        wanted = version or model["latest_version"]  # type: ignore[index]
        found = client.model_version(name, wanted, team)
    if output == Output.JSON:
        print_json(found if model is None else model | {"latest": found})
        return
    if model is not None:
        print_versions(model)
        out.print("")
    print_version(found)


def parse_reference(value: str) -> tuple[str, int | None]:
    """'resnet' -> ('resnet', None); 'resnet:3' -> ('resnet', 3)."""
    name, sep, version = value.partition(":")
    if not sep:
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise CliError(
            "invalid_version", f"'{version}' is not a version: give NAME or NAME:3 (1, 2, 3 ...)"
        )
    return name, int(version)


def print_versions(model: dict[str, Any]) -> None:
    out.print(f"[bold]{escape(model['name'])}[/bold]  team {escape(model['team'])}")
    table = new_table("VERSION", "JOB", "FILES", "SIZE", "METRICS", "REGISTERED", "BY")
    for version in model["versions"]:
        table.add_row(
            str(version["version"]),
            str(version["source_job_id"] or "-"),
            str(version["file_count"]),
            memory(version["size_bytes"]),
            escape(metrics_text(version["metrics"])),
            timestamp(version["created_at"]),
            escape(version["created_by"]),
        )
    out.print(table)


def print_version(version: dict[str, Any]) -> None:
    title = f"{version['name']}:{version['version']}"
    out.print(f"[bold]{escape(title)}[/bold]  team {escape(version['team'])}")
    if version.get("description"):
        out.print(escape(version["description"]))
    source = version["source_path"] or "all outputs"
    out.print(
        escape(
            f"from job {version['source_job_id']} ({source}) · registered "
            f"{timestamp(version['created_at'])} by {version['created_by']}"
        )
    )
    out.print(escape(f"command: {' '.join(version['spec'].get('command') or [])}"))
    out.print(escape(f"metrics: {metrics_text(version['metrics']) or 'none reported'}"))
    out.print(escape(f"archive: {version['archive']} ({memory(version['archive_bytes'])})"))
    table = new_table("FILE", "SIZE", "SHA256")
    for file in version["files"]:
        table.add_row(escape(file["path"]), memory(file["size"]), file["sha256"])
    out.print(table)


def metrics_text(metrics: dict[str, float]) -> str:
    """'accuracy=0.9 loss=0.125': the final metrics, by name."""
    return " ".join(f"{name}={value:g}" for name, value in sorted(metrics.items()))
