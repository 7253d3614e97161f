"""Notebooks: a JupyterLab of yours in your workspace, behind the server's sign-in.

gpupool notebook start --gpus 0.5           # prints its id and where to open it
gpupool notebook ls / show ID / open ID / stop ID / resume ID
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect
from gpupool.cli.options import OutputOption
from gpupool.cli.output import (
    Output,
    duration,
    escape,
    new_table,
    out,
    print_json,
    status_text,
    timestamp,
)

notebook_app = typer.Typer(
    help="Notebooks: a JupyterLab of yours in your workspace, behind the server's sign-in; "
    "start, list, show, open, stop and resume them.",
    no_args_is_help=True,
)
Id = Annotated[int, typer.Argument(help="The notebook's id, as 'gpupool notebook ls' lists it.")]


@notebook_app.command("start")
def start(
    gpus: Annotated[
        float | None, typer.Option(help="GPUs: 1, 2, or a share such as 0.5 (default: none).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="A name to know it by.")] = None,
    team: Annotated[
        str | None, typer.Option(help="The team to charge (needed when you are in several).")
    ] = None,
    gpu_type: Annotated[
        list[str] | None,
        typer.Option("--gpu-type", help="A GPU model it may run on (repeat for several)."),
    ] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs (default 1).")] = None,
    memory: Annotated[str | None, typer.Option(help="Host memory, such as 16GiB.")] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="A Python environment of your team (NAME or NAME@ID: gpupool env ls): its "
            "python is the kernel.",
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Start a notebook: JupyterLab in your workspace, as a job that is never preempted.

    It is stopped when its kernels stay idle and its GPUs unused for the server's idle time
    (30 min by default); its files stay, and 'gpupool notebook resume ID' starts it again.
    """
    resources = {"gpus": gpus, "cpus": cpus, "memory_bytes": memory}
    request: dict[str, Any] = {"resources": {k: v for k, v in resources.items() if v}}
    given = (("name", name), ("team", team), ("gpu_types", gpu_type), ("environment", env))
    request |= {k: v for k, v in given if v}
    with connect() as client:
        made = client.start_notebook(request)
        url = client.url + made["url"]
    if output == Output.JSON:
        print_json(made)
        return
    out.print(f"notebook {made['id']} {made['state']} (job {made['job_id']})")
    out.print(f"open it at {escape(url)} once it runs (gpupool notebook show {made['id']})")


@notebook_app.command("ls")
def ls(
    mine: Annotated[bool, typer.Option("--mine", help="Only your own.")] = False,
    output: OutputOption = Output.TABLE,
) -> None:
    """List the notebooks of your teams: owner, GPUs, state, and why one stopped."""
    with connect() as client:
        found = client.notebooks(mine)
    if output == Output.JSON:
        print_json(found)
        return
    table = new_table("ID", "NAME", "USER", "TEAM", "GPUS", "STATE", "STARTED", "MESSAGE")
    for nb in found:
        table.add_row(
            str(nb["id"]),
            escape(nb["name"] or ""),
            escape(nb["user"]),
            escape(nb["team"]),
            _gpus(nb["resources"]),
            status_text(nb["state"]),
            timestamp(nb["started_at"]),
            escape(nb["message"] or ""),
        )
    out.print(table)


@notebook_app.command("show")
def show(notebook_id: Id, output: OutputOption = Output.TABLE) -> None:
    """Show a notebook: its state, job, address, idle time, and why it stopped."""
    with connect() as client:
        found = client.notebook(notebook_id)
        url = client.url + found["url"]
    if output == Output.JSON:
        print_json(found)
        return
    rows = [
        ("notebook", f"{found['id']}" + (f" ({escape(found['name'])})" if found["name"] else "")),
        ("state", status_text(found["state"])),
        ("user", escape(found["user"])),
        ("team", escape(found["team"])),
        ("gpus", _gpus(found["resources"])),
        ("job", str(found["job_id"] or "-")),
        ("started", timestamp(found["started_at"])),
        ("stopped", timestamp(found["stopped_at"])),
        ("idle for", duration(found["idle_seconds"]) if found["idle_seconds"] else "-"),
        ("url", escape(url)),
    ]
    if found["message"]:
        rows.append(("why", escape(found["message"])))
    for key, value in rows:
        out.print(f"[bold]{key:>9}[/bold]  {value}")


@notebook_app.command("open")
def open_url(notebook_id: Id) -> None:
    """Print the address to open a notebook at (sign in to the web UI there first)."""
    with connect() as client:
        found = client.notebook(notebook_id)
        url = client.url + found["url"]
    out.print(escape(url), soft_wrap=True)
    if found["state"] != "running":
        out.print(f"notebook {notebook_id} is {found['state']}", style="dim")


@notebook_app.command("stop")
def stop(notebook_id: Id, output: OutputOption = Output.TABLE) -> None:
    """Stop a notebook: its GPUs go back to the pool; its workspace stays."""
    with connect() as client:
        _done(client.stop_notebook(notebook_id), output)


@notebook_app.command("resume")
def resume(notebook_id: Id, output: OutputOption = Output.TABLE) -> None:
    """Start a stopped notebook of yours again, in the same workspace."""
    with connect() as client:
        _done(client.resume_notebook(notebook_id), output)


# -- helpers -----------------------------------------------------------------------------------


def _done(found: dict[str, Any], output: Output) -> None:
    if output == Output.JSON:
        print_json(found)
        return
    out.print(f"notebook {found['id']} {found['state']} (job {found['job_id'] or '-'})")


def _gpus(resources: dict[str, Any]) -> str:
    count = resources.get("gpus")
    return f"{count:g}" if count else "-"
