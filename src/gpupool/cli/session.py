"""Logging in, who am I, and one's own password."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpupool.cli.connection import connect, read_config
from gpupool.cli.options import OutputOption
from gpupool.cli.output import CliError, Output, escape, out, print_json
from gpupool.client import Client, ClientConfig, save_config


def describe(who: dict) -> str:
    """'alice (member of ml, vision; team admin of ml)' from a /whoami answer."""
    teams = ", ".join(who.get("teams") or []) or "no team"
    admin_of = ", ".join(who.get("admin_of") or [])
    administers = f"; team admin of {admin_of}" if admin_of else ""
    return f"{who['user']} ({who['role']} of {teams}{administers})"


def login(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://gpu-box:8765.")],
    token: Annotated[
        str, typer.Option("--token", "-t", help="An API token (see 'gpupool tokens create').")
    ],
) -> None:
    """Check a token against a server and save both for later commands (mode 0600)."""
    if "://" not in url:
        url = f"http://{url}"
    client = Client(url, token)
    try:
        who = client.whoami()
    finally:
        client.close()
    path = save_config(ClientConfig(client.url, token))
    out.print(f"logged in to {escape(client.url)} as {escape(describe(who))}")
    out.print(f"[dim]config saved in {escape(str(path))}[/dim]")


def whoami(output: OutputOption = Output.TABLE) -> None:
    """Show the user the saved token belongs to, its role and teams."""
    config = read_config()
    with connect() as client:
        who = client.whoami()
    if output == Output.JSON:
        print_json({k: v for k, v in who.items() if v is not None} | {"url": config.url})
        return
    out.print(f"{escape(describe(who))} at {escape(config.url)}")


def passwd(
    password_stdin: Annotated[
        bool,
        typer.Option(
            "--password-stdin",
            help="Read the current password from stdin's first line (empty: you have none "
            "yet) and the new one from its second.",
        ),
    ] = False,
) -> None:
    """Change your own web UI password (asks the current one first).

    Web sessions opened with the old password end; API tokens keep working."""
    current, new = read_password_pair() if password_stdin else ask_password_pair()
    with connect() as client:
        who = client.change_password(current, new)
    out.print(f"password of {escape(who['user'])} changed")


def ask_password_pair() -> tuple[str | None, str]:
    """The current password (None: left empty) and the new one, typed twice; all hidden."""
    ask = "Current password (empty if you have none)"
    current = typer.prompt(ask, default="", show_default=False, hide_input=True)
    new = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    return current or None, new


def read_password_pair() -> tuple[str | None, str]:
    """The current password (None: an empty line) and the new one, from stdin's first lines."""
    current = sys.stdin.readline().rstrip("\r\n")
    new = sys.stdin.readline().rstrip("\r\n")
    if not new:
        raise CliError(
            "invalid_request",
            "no new password on stdin: give the current one on the first line (empty if you "
            "have none) and the new one on the second",
        )
    return current or None, new
