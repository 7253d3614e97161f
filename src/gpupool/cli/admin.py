"""Administration: users, teams and API tokens (sub-apps; the bare noun lists)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.table import Table

from gpupool.cli.connection import connect
from gpupool.cli.options import OutputOption
from gpupool.cli.output import (
    CliError,
    Output,
    err,
    escape,
    new_table,
    out,
    print_json,
    share,
    timestamp,
)
from gpupool.client import ApiError, Client
from gpupool.domain.jobs import Role
from gpupool.domain.units import format_bytes, parse_bytes

users_app = typer.Typer(help="Users of the pool (admins only).", invoke_without_command=True)
teams_app = typer.Typer(
    help="Teams and their GPU quotas: jobs are charged to, and visible within, a team.",
    invoke_without_command=True,
)
ANY_MODEL = "*"
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
    table = new_table("ID", "NAME", "ROLE", "TEAMS", "WEIGHT", "UNIX USER", "PASSWORD", "DISABLED")
    for user in found:
        table.add_row(
            str(user["id"]),
            escape(user["name"]),
            user["role"],
            escape(", ".join(user["teams"]) or "-"),
            share(user.get("weight", 1)),
            escape(user.get("unix_user") or "-"),
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
    weight: Annotated[
        float | None,
        typer.Option(
            help="Fair share inside its teams (default 1; 2: twice the GPU time).",
            callback=finite_weight,
        ),
    ] = None,
    unix_user: Annotated[
        str | None,
        typer.Option(
            metavar="ACCOUNT",
            help="The existing Unix account its jobs run under when the server runs as root "
            "(default: the server's default account).",
        ),
    ] = None,
) -> None:
    """Create a user (give it a token with 'gpupool tokens create --user NAME')."""
    password = read_password_stdin() if password_stdin else None
    with connect() as client:
        user = client.create_user(name, role.value, team or [], password, weight, unix_user)
    teams = ", ".join(user["teams"]) or "no team"
    account = f", Unix user {user['unix_user']}" if user.get("unix_user") else ""
    out.print(f"user {escape(user['name'])} created ({user['role']} of {escape(teams)}{account})")


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
        try:
            client.update_user(name, password=password)
        except ApiError as error:
            if error.code != "forbidden":
                raise
            raise CliError(
                "forbidden", "only admins set passwords here: change your own with 'gpupool passwd'"
            ) from None
    out.print(f"password of {escape(name)} set")


@users_app.command("disable")
def users_disable(name: Annotated[str, typer.Argument(help="The user's name.")]) -> None:
    """Disable a user: its tokens and web sessions stop working, its jobs keep running."""
    with connect() as client:
        user = client.update_user(name, disabled=True)
    out.print(f"{escape(user['name'])} is disabled (enable again: gpupool users enable NAME)")


@users_app.command("enable")
def users_enable(name: Annotated[str, typer.Argument(help="The user's name.")]) -> None:
    """Enable a disabled user again: its tokens work again (its web sessions have ended)."""
    with connect() as client:
        user = client.update_user(name, disabled=False)
    out.print(f"{escape(user['name'])} is enabled")


@users_app.command("set-role")
def users_set_role(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    role: Annotated[Role, typer.Argument(help="admin, member or viewer.")],
) -> None:
    """Change a user's role."""
    with connect() as client:
        user = client.update_user(name, role=role.value)
    out.print(f"{escape(user['name'])} is now {user['role']}")


@users_app.command("set-weight")
def users_set_weight(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    weight: Annotated[
        float,
        typer.Argument(
            help="Above 0; 1 is the default. Inside a team, a user of weight 2 is owed twice "
            "the GPU time of a user of weight 1 (fair share with decayed past usage).",
            callback=finite_weight,
        ),
    ],
) -> None:
    """Change a user's fair-share weight inside its teams (admins only)."""
    with connect() as client:
        user = client.update_user(name, weight=weight)
    out.print(f"weight of {escape(user['name'])} is now {share(user['weight'])}")


@users_app.command("set-unix-user")
def users_set_unix_user(
    name: Annotated[str, typer.Argument(help="The user's name.")],
    account: Annotated[
        str | None,
        typer.Argument(
            help="An existing Unix account, neither root nor the server's own; several users "
            "may share one.",
            show_default=False,
        ),
    ] = None,
    none: Annotated[
        bool, typer.Option("--none", help="Clear the mapping: the server's default account.")
    ] = False,
) -> None:
    """Map a user to the Unix account its jobs run under when the server runs as root."""
    if account is not None and none:
        raise typer.BadParameter("give a Unix ACCOUNT or --none, not both")
    if account is None and not none:
        raise typer.BadParameter("give a Unix ACCOUNT, or --none to clear the mapping")
    with connect() as client:
        user = client.update_user(name, unix_user=account)
    shown = user["unix_user"] or "none (the server's default account)"
    out.print(f"Unix user of {escape(user['name'])} is now {escape(shown)}")


def finite_weight(value: float | None) -> float | None:
    """A weight JSON can carry; the server checks the range (and says why, invalid_weight)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a weight: give a number such as 0.5, 1 or 2")
    return value


# -- teams -----------------------------------------------------------------------------------

GuaranteeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--guarantee",
        "-g",
        metavar="[MODEL=]GPUS",
        help="GPUs guaranteed to the team: '4' of any model, 'A100=2' of GPUs whose model "
        "contains A100; repeatable. '0' clears the guarantee.",
    ),
]
LimitOption = Annotated[
    float | None, typer.Option(help="The most GPUs the team may hold at once.", min=0)
]
WeightOption = Annotated[
    float | None,
    typer.Option(help="Its share of capacity nobody is guaranteed (default 1).", min=0.001),
]


def parse_storage(value: str | None) -> int | None:
    """'10GiB' -> 10737418240; None when no --storage was given."""
    if value is None:
        return None
    try:
        return parse_bytes(value)
    except (ValueError, OverflowError):
        raise typer.BadParameter(f"'{value}' is not a size: write e.g. 500GiB, 2TiB") from None


StorageOption = Annotated[
    str | None,
    typer.Option(
        "--storage",
        metavar="SIZE",
        help="The most its files may take (outputs, checkpoints, workspaces, logs, model and "
        "code archives), e.g. 500GiB; past it its running jobs are stopped.",
    ),
]


def parse_guarantee(values: list[str] | None) -> dict[str, float] | None:
    """['4', 'A100=2'] -> {'*': 4, 'A100': 2}; None when no --guarantee was given."""
    if not values:
        return None
    guarantee: dict[str, float] = {}
    for value in values:
        model, _, count = value.rpartition("=")
        model = model.strip() or ANY_MODEL
        if "=" in value and not value.partition("=")[0].strip():
            raise typer.BadParameter(f"'{value}' names no GPU model: write A100=2, or 2")
        try:
            gpus = float(count)
        except ValueError:
            gpus = -1.0
        if not math.isfinite(gpus) or gpus < 0:
            raise typer.BadParameter(
                f"'{value}' is not GPUS or MODEL=GPUS, e.g. --guarantee 4 --guarantee A100=2"
            )
        if model in guarantee:
            raise typer.BadParameter(f"the guarantee of '{model}' is given twice")
        guarantee[model] = gpus
    return guarantee


def guarantee_text(guarantee: dict[str, float]) -> str:
    """{'*': 4, 'A100': 2} -> '4, A100=2' (as --guarantee takes it); '-' when none."""
    parts = [share(guarantee[ANY_MODEL])] if ANY_MODEL in guarantee else []
    parts += [f"{m}={share(g)}" for m, g in sorted(guarantee.items()) if m != ANY_MODEL]
    return ", ".join(parts) or "-"


def in_use_text(usage: dict[str, Any]) -> str:
    """'3', or '3 (A100-SXM4-80GB 2, H100 1)' when the team holds several models."""
    by_model = usage.get("by_model") or {}
    text = share(usage["gpus"])
    if len(by_model) > 1:
        text += " (" + ", ".join(f"{m} {share(g)}" for m, g in sorted(by_model.items())) + ")"
    return text


def teams_table(found: list[dict[str, Any]]) -> Table:
    table = new_table(
        "TEAM", "GUARANTEE", "LIMIT", "WEIGHT", "IN USE", "PENDING", "STORAGE", "ADMINS"
    )
    for team in found:
        limit = team.get("limit")
        table.add_row(
            escape(team["name"]),
            escape(guarantee_text(team.get("guarantee") or {})),
            "-" if limit is None else share(limit),
            share(team.get("weight", 1)),
            escape(in_use_text(team.get("usage") or {"gpus": 0})),
            str(team.get("pending", 0)),
            escape(storage_text(team.get("storage") or {})),
            escape(", ".join(team.get("admins") or []) or "-"),
        )
    return table


def storage_text(storage: dict[str, Any]) -> str:
    """'3.2 GiB of 10 GiB', '3.2 GiB (no quota)', 'OVER: 12 GiB of 10 GiB'; '-' unscanned."""
    used, quota = storage.get("used"), storage.get("quota")
    if used is None:
        return "not scanned yet" if quota is None else f"- of {format_bytes(quota)}"
    if quota is None:
        return f"{format_bytes(used)} (no quota)"
    over = "OVER: " if storage.get("over") else ""
    return f"{over}{format_bytes(used)} of {format_bytes(quota)}"


@teams_app.callback()
def teams(ctx: typer.Context, output: OutputOption = Output.TABLE) -> None:
    """List teams with their quotas and what they use, or manage them with a sub-command."""
    _listing(ctx, output, Client.teams, teams_table)


@teams_app.command("create")
def teams_create(
    name: Annotated[str, typer.Argument(help="The team's name.")],
    guarantee: GuaranteeOption = None,
    limit: LimitOption = None,
    weight: WeightOption = None,
    storage: StorageOption = None,
) -> None:
    """Create a team, with a GPU and storage quota if given (admins only)."""
    size = parse_storage(storage)
    with connect() as client:
        team = client.create_team(name, parse_guarantee(guarantee), limit, weight, size)
    out.print(f"team {escape(team['name'])} created{escape(quota_note(team))}")


@teams_app.command("set-quota")
def teams_set_quota(
    name: Annotated[str, typer.Argument(help="The team's name.")],
    guarantee: GuaranteeOption = None,
    limit: LimitOption = None,
    no_limit: Annotated[bool, typer.Option("--no-limit", help="Remove the limit.")] = False,
    weight: WeightOption = None,
    storage: StorageOption = None,
    no_storage: Annotated[
        bool, typer.Option("--no-storage", help="Remove the storage quota.")
    ] = False,
) -> None:
    """Change a team's quota; what is not given stays as it is (admins only)."""
    if no_limit and limit is not None:
        raise typer.BadParameter("give --limit or --no-limit, not both")
    if no_storage and storage is not None:
        raise typer.BadParameter("give --storage or --no-storage, not both")
    size = parse_storage(storage)
    with connect() as client:
        current = _team(client, name)
        team = client.set_quota(
            name,
            guarantee=_or(parse_guarantee(guarantee), current.get("guarantee") or {}),
            limit=None if no_limit else _or(limit, current.get("limit")),
            weight=_or(weight, current.get("weight", 1.0)),
            storage=None if no_storage else _or(size, (current.get("storage") or {}).get("quota")),
        )
    out.print(f"quota of team {escape(team['name'])} set{escape(quota_note(team))}")


@teams_app.command("show")
def teams_show(
    name: Annotated[str, typer.Argument(help="The team's name.")],
    output: OutputOption = Output.TABLE,
) -> None:
    """Show a team: its quotas, the GPUs it holds and what its files take (its members and
    admins)."""
    with connect() as client:
        team = _team(client, name)
    if output == Output.JSON:
        print_json(team)
        return
    storage = team.get("storage") or {}
    limit = team.get("limit")
    out.print(f"team {escape(team['name'])}")
    out.print(f"  guarantee  {escape(guarantee_text(team.get('guarantee') or {}))}")
    out.print(f"  limit      {'none' if limit is None else share(limit)}")
    out.print(f"  weight     {share(team.get('weight', 1))}")
    out.print(f"  in use     {escape(in_use_text(team.get('usage') or {'gpus': 0}))} GPUs")
    out.print(f"  pending    {team.get('pending', 0)}")
    out.print(f"  storage    {escape(storage_text(storage))}{_scanned(storage)}")
    out.print(f"  admins     {escape(', '.join(team.get('admins') or []) or '-')}")


def _scanned(storage: dict[str, Any]) -> str:
    at = storage.get("scanned_at")
    return f", summed {timestamp(at)}" if at is not None else ""


@teams_app.command("add-member")
def teams_add_member(
    name: Annotated[str, typer.Argument(help="The team's name.")],
    user: Annotated[str, typer.Argument(help="The user's name.")],
    admin: Annotated[
        bool, typer.Option("--admin", help="Make it a team admin of the team too.")
    ] = False,
) -> None:
    """Make a user a member of the team: it sees and submits the team's jobs (pool admins
    and the team's admins)."""
    with connect() as client:
        found = client.add_member(name, user, True if admin else None)
    teams = ", ".join(found["teams"])
    role = "a team admin" if name in found.get("admin_of", []) else "a member"
    out.print(f"{escape(found['name'])} is {role} of {escape(name)} (teams: {escape(teams)})")


@teams_app.command("set-admin")
def teams_set_admin(
    name: Annotated[str, typer.Argument(help="The team's name.")],
    user: Annotated[str, typer.Argument(help="The user's name (made a member if it is not).")],
    no: Annotated[
        bool, typer.Option("--no", help="End its being a team admin; it stays a member.")
    ] = False,
) -> None:
    """Make a member of the team a team admin, who adds and removes the team's members and
    names its team admins; or, with --no, not one (pool admins and the team's admins)."""
    with connect() as client:
        found = client.add_member(name, user, not no)
    if no:
        out.print(f"{escape(found['name'])} is no longer a team admin of {escape(name)}")
    else:
        out.print(f"{escape(found['name'])} is a team admin of {escape(name)}")


@teams_app.command("remove-member")
def teams_remove_member(
    name: Annotated[str, typer.Argument(help="The team's name.")],
    user: Annotated[str, typer.Argument(help="The user's name.")],
) -> None:
    """End a user's membership of the team; its jobs there stay in it (pool admins and the
    team's admins)."""
    with connect() as client:
        found = client.remove_member(name, user)
    teams = ", ".join(found["teams"]) or "none"
    out.print(f"{escape(found['name'])} left {escape(name)} (teams: {escape(teams)})")


@teams_app.command("delete")
def teams_delete(name: Annotated[str, typer.Argument(help="The team's name.")]) -> None:
    """Delete a team without pending or running jobs; its members leave it (admins only)."""
    with connect() as client:
        deleted = client.delete_team(name)
    kept = deleted["finished_jobs"]
    note = f"; the records of its {kept} finished job(s) are kept" if kept else ""
    out.print(f"team {escape(deleted['name'])} deleted{note}")


def quota_note(team: dict[str, Any]) -> str:
    """': guarantee 4, A100=2, limit 8, weight 1', or '' for a team without a quota."""
    guarantee, limit, weight = team.get("guarantee") or {}, team.get("limit"), team["weight"]
    storage = (team.get("storage") or {}).get("quota")
    if not guarantee and limit is None and weight == 1 and storage is None:
        return ""
    limit_text = "none" if limit is None else share(limit)
    storage_note = f", storage {format_bytes(storage)}" if storage is not None else ""
    return (
        f": guarantee {guarantee_text(guarantee)}, limit {limit_text}, weight {share(weight)}"
        f"{storage_note}"
    )


def _team(client: Client, name: str) -> dict[str, Any]:
    for team in client.teams():
        if team["name"] == name:
            return team
    raise CliError("unknown_team", f"no team named '{name}': list teams with 'gpupool team'")


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


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
