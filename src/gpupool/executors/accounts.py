"""Unix accounts that jobs run under when the server runs as root.

A gpupool user may be mapped to an existing Unix account (``gpupool users set-unix-user``);
the server may create accounts itself (``GPUPOOL_CREATE_UNIX_USERS``, like JupyterHub's
``create_system_users``); everyone else runs as one dedicated unprivileged account
(``GPUPOOL_JOB_ACCOUNT``). A job never runs as root, and never as the server's own account.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass

# What useradd accepts on Debian and most distributions (and at most 32 characters).
ACCOUNT_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
CREATED_PREFIX = "gp-"  # accounts gpupool creates for its users: gp-<user>
NOLOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")


class AccountError(Exception):
    """An account cannot be used for jobs; the message says why and what to do."""


@dataclass(frozen=True)
class Account:
    """A Unix account as a job runs under it: its ids and supplementary groups."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "uid": self.uid, "gid": self.gid, "groups": list(self.groups)}


def lookup(name: str) -> Account | None:
    """The account named ``name`` on this machine, or None when there is none."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    try:
        groups = tuple(sorted(set(os.getgrouplist(name, entry.pw_gid))))
    except OSError:
        groups = (entry.pw_gid,)
    return Account(name, entry.pw_uid, entry.pw_gid, groups)


def problem(name: str, server_uid: int | None = None) -> str | None:
    """Why ``name`` cannot run jobs on this machine, or None when it can.

    Refused: a malformed name, an account that does not exist, root, and the server's own
    account (a job under it could read the server's database and its users' tokens).
    """
    if not ACCOUNT_NAME.match(name):
        return (
            f"'{name}' is not a Unix account name: use up to 32 lower-case letters, digits, "
            "'_', '.' or '-', starting with a letter or '_'"
        )
    account = lookup(name)
    if account is None:
        return (
            f"there is no Unix account '{name}' on this server: create it (useradd {name}), "
            "or let gpupool create accounts (GPUPOOL_CREATE_UNIX_USERS=true)"
        )
    if account.uid == 0:
        return f"jobs never run as root: map to an unprivileged account, not '{name}'"
    server = os.getuid() if server_uid is None else server_uid
    if account.uid == server:
        return (
            f"'{name}' is the server's own account: a job under it could read the server's "
            "database; map to another account"
        )
    return None


def require(name: str, server_uid: int | None = None) -> Account:
    """The account, if it may run jobs; else AccountError saying why."""
    reason = problem(name, server_uid)
    if reason is not None:
        raise AccountError(reason)
    account = lookup(name)
    assert account is not None  # problem() found it
    return account


def created_name(user: str) -> str:
    """The account gpupool creates for one of its users (``gp-ann``)."""
    return f"{CREATED_PREFIX}{user}"


class Accounts:
    """Resolves the account of each job, creating accounts where the settings allow.

    ``default``: the dedicated account of users without one of their own; created when it is
    missing (it is the server's own service account for jobs). ``create``: give each user
    without a mapping an account of their own (``gp-<user>``), created on first use.
    """

    def __init__(self, default: str, create: bool = False) -> None:
        self.default = default
        self.create = create
        self._lock = threading.Lock()
        self._known: dict[str, Account] = {}

    def for_job(self, user: str, mapped: str | None) -> Account:
        """The account a job of ``user`` (mapped to ``mapped``) runs under."""
        if mapped:
            return self._resolve(mapped, create=False)
        if self.create:
            return self._resolve(created_name(user), create=True, comment=f"gpupool user {user}")
        return self._resolve(self.default, create=True, comment="gpupool jobs")

    def _resolve(self, name: str, create: bool, comment: str = "") -> Account:
        with self._lock:
            known = self._known.get(name)
            if known is not None:
                return known
            if create and lookup(name) is None:
                create_system_account(name, comment)
            account = require(name)
            self._known[name] = account
            return account


def create_system_account(name: str, comment: str) -> None:
    """Create an unprivileged system account with its own group, no home and no login."""
    if not ACCOUNT_NAME.match(name):
        raise AccountError(
            f"cannot create the Unix account '{name}': the name is not valid for useradd; "
            "map the user to an existing account with 'gpupool users set-unix-user'"
        )
    useradd = shutil.which("useradd", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if useradd is None:
        raise AccountError(f"cannot create the Unix account '{name}': useradd is not installed")
    shell = next((s for s in NOLOGIN_SHELLS if os.path.exists(s)), "/bin/false")
    argv = [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
    argv += ["--shell", shell, "--comment", comment, name]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0 and lookup(name) is None:
        reason = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
        raise AccountError(f"cannot create the Unix account '{name}': {reason}")
