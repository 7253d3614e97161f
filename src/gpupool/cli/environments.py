"""Python environments: make one from a requirements file, a pyproject.toml or a uv.lock;
list, show and remove them; register a prefix that is on every node (admins). A job runs in
one with ``gpupool run --env NAME[@ID]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect
from gpupool.cli.options import OutputOption
from gpupool.cli.output import CliError, Output, escape, new_table, out, print_json, timestamp

env_app = typer.Typer(
    help="Python environments: your teams' locked sets of packages (make one from "
    "requirements.txt, pyproject.toml or uv.lock); run a job in one with gpupool run "
    "--env NAME.",
    no_args_is_help=True,
)
TeamOption = Annotated[
    str | None,
    typer.Option("--team", help="The environment's team, when several of yours have one."),
]
MAX_FILE_BYTES = 1024 * 1024


@env_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Its name (lower-case letters, digits, . _ -).")],
    requirements: Annotated[
        Path | None,
        typer.Option("--requirements", "-r", help="A requirements file: one package a line."),
    ] = None,
    lock: Annotated[
        Path | None, typer.Option("--lock", help="A uv.lock: its packages, at its versions.")
    ] = None,
    pyproject: Annotated[
        Path | None,
        typer.Option("--pyproject", help="A pyproject.toml: its [project] dependencies."),
    ] = None,
    python: Annotated[
        str | None, typer.Option("--python", help="Its Python version, e.g. 3.11.")
    ] = None,
    team: Annotated[
        str | None, typer.Option("--team", help="Its team (default: your only team).")
    ] = None,
    description: Annotated[
        str | None, typer.Option("--description", "-d", help="What it is for.")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Make an environment (or a new version of one) from the packages in a file.

    The server resolves them now against the site's package index and pins every package
    with its hashes; each node builds the environment the first time one of its jobs needs
    it, once, and jobs find it read-only with its python first on PATH. The same packages
    resolved the same way are the same version: making it again gives it back.
    """
    given = [(k, p) for k, p in (("requirements", requirements), ("lock", lock)) if p]
    given += [("pyproject", pyproject)] if pyproject else []
    if len(given) != 1:
        raise CliError(
            "invalid_environment",
            "give exactly one of -r requirements.txt, --lock uv.lock or --pyproject pyproject.toml",
        )
    kind, path = given[0]
    body: dict[str, Any] = {"name": name, kind: _read(path)}
    body |= {k: v for k, v in (("python", python), ("team", team)) if v}
    if description:
        body["description"] = description
    with connect() as client:
        found = client.create_environment(body)
    if output == Output.JSON:
        print_json(found)
        return
    said = (
        f"environment {found['name']}@{found['short_id']} (team {found['team']}, Python "
        f"{found['python']}): {len(found['packages'])} packages; run a job in it with "
        f"gpupool run --env {found['name']} -- python ..."
    )
    out.print(escape(said))


@env_app.command("register")
def register(
    name: Annotated[str, typer.Argument(help="Its name (lower-case letters, digits, . _ -).")],
    path: Annotated[
        str, typer.Option("--path", help="The prefix's absolute path, the same on every node.")
    ],
    team: Annotated[
        str | None, typer.Option("--team", help="The team that may use it (default: every team).")
    ] = None,
    description: Annotated[
        str | None, typer.Option("--description", "-d", help="What it is.")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Register a prefix that exists on every node (a conda environment, a module tree) as an
    environment: jobs get its bin/ first on PATH, read-only. Admins only."""
    body = {"name": name, "path": path, "team": team, "description": description}
    with connect() as client:
        found = client.register_environment({k: v for k, v in body.items() if v is not None})
    if output == Output.JSON:
        print_json(found)
        return
    whose = f"team {found['team']}" if found["team"] else "every team"
    out.print(escape(f"environment {found['name']} is the prefix {found['prefix']} ({whose})"))


@env_app.command("ls")
def ls(team: TeamOption = None, output: OutputOption = Output.TABLE) -> None:
    """List the environments of your teams (and those for every team), newest version each."""
    with connect() as client:
        found = client.environments(team)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("NAME", "TEAM", "ID", "PYTHON", "PACKAGES", "VERSIONS", "JOBS", "MADE")
    for env in found:
        latest = env["latest"]
        table.add_row(
            escape(env["name"]),
            escape(env["team"] or "(all)"),
            latest["short_id"],
            latest["python"] or "-",
            _packages(latest),
            str(env["version_count"]),
            str(latest["jobs"]),
            timestamp(latest["created_at"]),
        )
    out.print(table)


@env_app.command("show")
def show(
    ref: Annotated[
        str, typer.Argument(metavar="NAME[@ID]", help="An environment, or one of its versions.")
    ],
    team: TeamOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show an environment's versions, or one version with its packages and lock."""
    with connect() as client:
        found = client.environment(ref, team)
    if output == Output.JSON:
        print_json(found)
        return
    if "versions" not in found:
        _print_version(found)
        return
    whose = f"team {found['team']}" if found["team"] else "every team"
    out.print(f"[bold]{escape(found['name'])}[/bold]  {escape(whose)}")
    if found.get("description"):
        out.print(escape(found["description"]))
    table = new_table("ID", "PYTHON", "FROM", "PACKAGES", "JOBS", "MADE", "BY")
    for version in found["versions"]:
        table.add_row(
            version["short_id"],
            version["python"] or "-",
            version["kind"],
            _packages(version),
            str(version["jobs"]),
            timestamp(version["created_at"]),
            escape(version["created_by"]),
        )
    out.print(table)


@env_app.command("rm")
def rm(
    ref: Annotated[
        str,
        typer.Argument(metavar="NAME[@ID]", help="An environment (all its versions), or one."),
    ],
    team: TeamOption = None,
) -> None:
    """Remove an environment, or one version of it; refused while a pending or running job
    uses it."""
    with connect() as client:
        removed = client.remove_environment(ref, team)
    noun = "version" if len(removed) == 1 else "versions"
    out.print(escape(f"removed {ref}: {len(removed)} {noun}"))


def _print_version(version: dict[str, Any]) -> None:
    title = f"{version['name']}@{version['short_id']}"
    whose = f"team {version['team']}" if version["team"] else "every team"
    out.print(f"[bold]{escape(title)}[/bold]  {escape(whose)}")
    out.print(escape(f"id: {version['id']}"))
    if version["prefix"]:
        out.print(escape(f"prefix: {version['prefix']} (registered)"))
    else:
        out.print(escape(f"Python {version['python']} · {version['platform']}"))
    made = f"made {timestamp(version['created_at'])} by {version['created_by']}"
    out.print(escape(f"from {version['kind']} · {made} · used by {version['jobs']} jobs"))
    if version["packages"]:
        out.print(escape("packages: " + " ".join(version["packages"])))


def _packages(version: dict[str, Any]) -> str:
    if version.get("prefix"):
        return escape(version["prefix"])
    return str(len(version["packages"]))


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CliError("file_unreadable", f"cannot read {path}: {e.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CliError("file_too_large", f"{path} is over 1 MiB: is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError("file_unreadable", f"{path} is not UTF-8 text") from None
