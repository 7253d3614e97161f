"""Administration: users, teams and API tokens (sub-apps; the bare noun lists)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpupool.cli.output import (
    CliError,
    Output,
    OutputOption,
    err,
    new_table,
    out,
    print_json,
    timestamp,
)
from gpupool.cli.session import connect
from gpupool.client import Client
from gpupool.domain.jobs import Role

users_app = typer.Typer(help="Users of the pool (admins only).", invoke_without_command=True)
teams_app = typer.Typer(
    help="Teams: jobs are charged to, and visible within, a team.", invoke_without_command=True
)
tokens_app = typer.Typer(
    help="API tokens (yours; an admin's: everyone's).", invoke_without_command=True
)

PasswordStdin = Annotated[
    bool, typer.Option("--password-stdin", help="Read the password from stdin's first line.")
]


def read_password_stdin() -> str:
    """The first line of stdin, without its newline; CliError if empty."""
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("invalid_request", "no password on stdin")
    return password


def _listing(
    ctx: typer.Context,
    output: Output,
    fetch: Callable[[Client], list[dict[str, Any]]],
    render: Callable[[list[dict[str, Any]]], Table],
) -> None:
    """Run the list action of a sub-app when no sub-command is given."""
    if ctx.invoked_subcommand is not None:
        return
    with connect() as client:
        found = fetch(client)
    if output == Output.JSON:
        print_json(found)
    else:
        out.print(render(found))


# -- users -----------------------------------------------------------------------------------


def users_table(found: list[dict[str, Any]]) -> Table:
    table = new_table("ID", "NAME", "ROLE", "TEAMS", "PASSWORD", "DISABLED")
    for user in found:
        table.add_row(
            str(user["id"]),
            escape(user["name"]),
            user["role"],
            escape(", ".join(user["teams"]) or "-"),
            "set" if user["has_password"] else "-",
            "yes" if user["disabled"] else "-",
        )
    return table


@users_app.callback()
def users(ctx: typer.Context, output: OutputOption = Output.TABLE) -> None:
    """List users, or manage them with a sub-command."""
    _listing(ctx, output, Client.users, users_table)


@users_app.command("create")
def users_create(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    role: Annotated[Role, typer.Option(help="admin, member or viewer.")] = Role.MEMBER,
    team: Annotated[
        list[str] | None, typer.Option("--team", help="A team to join; repeatable.")
    ] = None,
    password_stdin: PasswordStdin = False,
) -> None:
    """Create a user (give it a token with 'gpupool tokens create --user NAME')."""
    password = read_password_stdin() if password_stdin else None
    with connect() as client:
        user = client.create_user(name, role.value, team or [], password)
    teams = ", ".join(user["teams"]) or "no team"
    out.print(f"user {escape(user['name'])} created ({user['role']} of {escape(teams)})")


@users_app.command("set-password")
def users_set_password(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    password_stdin: PasswordStdin = False,
) -> None:
    """Set a user's web UI password (asked twice, hidden)."""
    if password_stdin:
        password = read_password_stdin()
    else:
        password = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    with connect() as client:
        client.update_user(name, password=password)
    out.print(f"password of {escape(name)} set")


@users_app.command("set-role")
def users_set_role(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    role: Annotated[Role, typer.Argument(help="admin, member or viewer.")],
) -> None:
    """Change a user's role."""
    with connect() as client:
        user = client.update_user(name, role=role.value)
    out.print(f"{escape(user['name'])} is now {user['role']}")


# -- teams -----------------------------------------------------------------------------------


def teams_table(found: list[dict[str, Any]]) -> Table:
    table = new_table("ID", "NAME")
    for team in found:
        table.add_row(str(team["id"]), escape(team["name"]))
    return table


@teams_app.callback()
def teams(ctx: typer.Context, output: OutputOption = Output.TABLE) -> None:
    """List teams, or create one with 'gpupool teams create NAME'."""
    _listing(ctx, output, Client.teams, teams_table)


@teams_app.command("create")
def teams_create(name: Annotated[str, typer.Argument(help="The team's name.")]) -> None:
    """Create a team."""
    with connect() as client:
        team = client.create_team(name)
    out.print(f"team {escape(team['name'])} created")


# -- tokens ----------------------------------------------------------------------------------


def tokens_table(found: list[dict[str, Any]]) -> Table:
    table = new_table("ID", "USER", "NAME", "PREFIX", "CREATED", "LAST USED", "EXPIRES", "STATE")
    for token in found:
        table.add_row(
            str(token["id"]),
            escape(token["user"]),
            escape(token["name"]),
            escape(token["prefix"]),
            timestamp(token["created_at"]),
            timestamp(token.get("last_used_at")),
            timestamp(token.get("expires_at")),
            "[red]revoked[/red]" if token["revoked"] else "active",
        )
    return table


@tokens_app.callback()
def tokens(ctx: typer.Context, output: OutputOption = Output.TABLE) -> None:
    """List API tokens, or create and revoke them."""
    _listing(ctx, output, Client.tokens, tokens_table)


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Option(help="A label for the token.")] = "cli",
    user: Annotated[str | None, typer.Option(help="Another user's token (admins only).")] = None,
    expires_in_days: Annotated[
        float | None, typer.Option(help="Expire after this many days (default: never).")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Create an API token and print its secret (shown this once)."""
    with connect() as client:
        token = client.create_token(name, user, expires_in_days)
    if output == Output.JSON:
        print_json(token)
        return
    typer.echo(token["token"])
    err.print(
        f"[dim]token {token['id']} for {escape(token['user'])} ({escape(token['name'])}): "
        "shown once, store it now[/dim]"
    )


@tokens_app.command("revoke")
def tokens_revoke(token_id: Annotated[int, typer.Argument(metavar="ID", help="Token id.")]) -> None:
    """Revoke an API token."""
    with connect() as client:
        token = client.revoke_token(token_id)
    out.print(f"token {token['id']} of {escape(token['user'])} revoked")
