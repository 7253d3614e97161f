"""Admin access recovered on the server's host, when the first start's token is lost.

Whoever can read and write the data directory (0700: the server's account, or root) already
holds every secret in it, so issuing them a token gives nothing away; nobody else gets in.
The token is named after the host account that asked, so ``gpupool tokens`` shows who did.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import inspect
from sqlalchemy.orm import Session

import gpupool.services.identity._auth as auth
import gpupool.services.identity._users as users
from gpupool.domain.jobs import Role
from gpupool.errors import Forbidden, NotFound
from gpupool.services.core import current_holder
from gpupool.settings import Settings
from gpupool.store.db import Database, prepare
from gpupool.store.models import UserModel

DATABASE_FILE = "gpupool.db"
_WHERE = "give the server's data directory with --data-dir (or GPUPOOL_DATA_DIR)"


class NoPool(NotFound):
    """No gpupool database here: give the server's data directory with --data-dir (or
    GPUPOOL_DATA_DIR)."""

    code = "no_pool"


@dataclass(frozen=True)
class RecoveredToken:
    """A new API token for an admin, and where the server that will accept it listens."""

    user: str
    token: str
    url: str
    server_running: bool


def issue_admin_token(settings: Settings, user: str, now: float) -> RecoveredToken:
    """A new API token for admin ``user`` of the pool in ``settings.data_dir``.

    Raises Forbidden when this account cannot read and write the data directory (or the
    user is no enabled admin), NoPool when there is no database there, and SchemaMismatch
    when the database needs 'gpupool db upgrade'.
    """
    check_data_dir(settings)
    database = Database(settings.database)
    try:
        prepare_existing(database)
        with database.session() as session:
            admin = _admin(session, user)
            token, _ = auth.create_token(session, admin, _token_name(), now)
    finally:
        database.dispose()
    holder = current_holder(settings.data_dir)
    url = holder.url if holder and holder.url else f"http://{settings.host}:{settings.port}"
    return RecoveredToken(user, token, url, holder is not None)


def check_data_dir(settings: Settings) -> None:
    """Refuse unless this account may read and write the data directory and its database."""
    data_dir = settings.data_dir
    try:
        exists = data_dir.is_dir()
    except PermissionError:
        exists = True  # a parent hides it: say what cannot be read, below
    if not exists:
        raise NoPool(f"no gpupool data directory at {data_dir}: {_WHERE}")
    if not _may_use(data_dir):
        raise Forbidden(
            f"this account ({_account()}) cannot read and write {data_dir}; run the "
            "command as the account the server runs as, or as root"
        )
    database = data_dir / DATABASE_FILE
    if settings.is_sqlite and not database.exists():
        raise NoPool(f"no gpupool database in {data_dir}: {_WHERE}")
    if settings.is_sqlite and not os.access(database, os.R_OK | os.W_OK):
        raise Forbidden(f"this account cannot read and write {database}; run it as its owner")


def prepare_existing(database: Database) -> None:
    """Refuse an empty database or one at another schema revision (never create one)."""
    if not inspect(database.engine).has_table("users"):
        raise NoPool("the database holds no gpupool pool yet: start the server once")
    prepare(database)


def _admin(session: Session, name: str) -> UserModel:
    admin = users.get_user(session, name)
    if admin.role != Role.ADMIN.value or admin.disabled:
        state = "disabled" if admin.disabled else f"a {admin.role}, not an admin"
        raise Forbidden(f"user '{name}' is {state}: name an enabled admin with --user")
    return admin


def _may_use(path: Path) -> bool:
    return os.access(path, os.R_OK | os.W_OK | os.X_OK)


def _token_name() -> str:
    return f"admin-token on the host by {_account()}"


def _account() -> str:
    """This process's account name (its uid where it has none, as in a bare container)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"
