"""Acceptance: an admin maps users to the Unix accounts their jobs run under, with the CLI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cli import Cli, refused
from tests.support.unix import system_account


@pytest.fixture(scope="module")
def account() -> Iterator[str]:
    """An existing unprivileged Unix account (made for the module: needs root)."""
    with system_account() as name:
        yield name


def unix_users(admin: Cli) -> dict[str, str | None]:
    return {user["name"]: user["unix_user"] for user in admin.json("users")}


def row(table: str, user: str) -> list[str]:
    """The cells of ``user``'s row in the users table."""
    return next(line.split() for line in table.splitlines() if line.split()[1:2] == [user])


def test_users_are_mapped_at_creation_changed_and_cleared(admin: Cli, account: str) -> None:
    created = admin.ok("users", "create", "uma", "--team", "default", "--unix-user", account)
    assert f"Unix user {account}" in created
    admin.ok("users", "create", "ugo", "--team", "default")
    assert unix_users(admin).items() >= {"uma": account, "ugo": None}.items()
    table = admin.ok("users")
    assert "UNIX USER" in table
    assert account in row(table, "uma") and account not in row(table, "ugo")
    assert "-" in row(table, "ugo")

    changed = admin.ok("users", "set-unix-user", "ugo", account)  # shared, as in Slurm
    assert f"Unix user of ugo is now {account}" in changed
    cleared = admin.ok("users", "set-unix-user", "uma", "--none")
    assert "Unix user of uma is now none" in cleared
    assert unix_users(admin).items() >= {"uma": None, "ugo": account}.items()


def test_accounts_jobs_must_not_run_under_are_refused_with_what_to_do(admin: Cli) -> None:
    admin.ok("users", "create", "ulla", "--team", "default")
    unknown = admin("users", "set-unix-user", "ulla", "gpt-no-such-account")
    assert refused(unknown, "unix_user_not_allowed")
    assert "no Unix account 'gpt-no-such-account'" in unknown.stderr
    assert "useradd gpt-no-such-account" in unknown.stderr
    root = admin("users", "set-unix-user", "ulla", "root")
    assert refused(root, "unix_user_not_allowed") and "never run as root" in root.stderr
    created = admin("users", "create", "uwe", "--unix-user", "Bad Name")
    assert refused(created, "unix_user_not_allowed") and "not a Unix account name" in created.stderr
    assert "uwe" not in unix_users(admin) and unix_users(admin)["ulla"] is None


def test_set_unix_user_takes_one_account_or_none(admin: Cli) -> None:
    admin.ok("users", "create", "uri", "--team", "default")
    neither = admin("users", "set-unix-user", "uri")
    assert neither.returncode == 2 and "--none" in neither.stderr
    both = admin("users", "set-unix-user", "uri", "nobody", "--none")
    assert both.returncode == 2 and "not both" in both.stderr
    assert refused(admin("users", "set-unix-user", "nobody-here", "--none"), "not_found")
    secret = admin.ok("tokens", "create", "--user", "uri").strip()
    assert refused(Cli(admin.url, secret)("users", "set-unix-user", "uri", "--none"), "forbidden")
