"""Engine and sessions. SQLite runs in WAL mode with foreign keys on and a busy timeout."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gpupool.errors import SchemaMismatch, StorageFull

SQLITE_FULL = 13
POSTGRES_DISK_FULL = "53100"

MIGRATIONS = Path(__file__).parent / "migrations"


class Database:
    """One engine and its session factory. Never hold a session across process or network I/O."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._writer = sessionmaker(self.engine, expire_on_commit=False)
        # SQLite: writers take the lock when they begin (BEGIN IMMEDIATE), so a transaction
        # that reads then writes waits its turn instead of failing; readers never wait.
        self.read_engine = make_engine(url, immediate=False) if self.is_sqlite else self.engine
        self._reader = sessionmaker(self.read_engine, expire_on_commit=False)
        # SQLite has one writer at a time; its busy handler waits with growing sleeps, which
        # leaves the lock idle under contention. Writers of this process queue here instead.
        self._write_lock = threading.Lock() if self.is_sqlite else contextlib.nullcontext()

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work that may write: commits on success, rolls back on error. A full
        disk raises StorageFull (nothing of the unit was recorded)."""
        try:
            with self._write_lock, self._writer() as session, session.begin():
                yield session
        except OperationalError as error:
            if storage_full(error):
                raise StorageFull() from error
            raise

    @contextmanager
    def reader(self) -> Iterator[Session]:
        """A read-only unit of work; it never blocks writers."""
        with self._reader() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()


def storage_full(error: OperationalError) -> bool:
    """Whether the database refused a write because its disk (or quota) is full."""
    original = error.orig
    if getattr(original, "sqlite_errorcode", None) == SQLITE_FULL:
        return True
    if getattr(original, "sqlstate", None) == POSTGRES_DISK_FULL:
        return True
    return "database or disk is full" in str(original)


def make_engine(url: str, immediate: bool = True) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    event.listen(engine, "connect", _sqlite_pragmas)
    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"
    event.listen(engine, "begin", lambda connection: connection.exec_driver_sql(begin))
    return engine


def _sqlite_pragmas(connection, _record) -> None:  # noqa: ANN001 - DB-API connection
    connection.isolation_level = None  # SQLAlchemy's "begin" event issues BEGIN itself
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    # NORMAL in WAL mode keeps every committed transaction across a process kill (even -9);
    # only a power loss can drop the last commits.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the schema; a SQLite file is copied aside first."""
    _backup_sqlite(url)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def prepare(database: Database) -> None:
    """Create the schema of an empty database; refuse a database at another revision."""
    current = current_revision(database.engine)
    if current is None and not inspect(database.engine).get_table_names():
        command.upgrade(alembic_config(database.url), "head")
        return
    head = head_revision()
    if current != head:
        raise SchemaMismatch(
            f"the database schema is at revision {current or 'none'} but this gpupool needs "
            f"{head}: run 'gpupool db upgrade' (it backs up a SQLite file first), then start "
            "the server again"
        )


def _backup_sqlite(url: str) -> None:
    if not url.startswith("sqlite:///"):
        return
    path = Path(url.removeprefix("sqlite:///"))
    if path.exists() and path.stat().st_size > 0:
        shutil.copy2(path, path.with_name(f"{path.name}.bak-{int(time.time())}"))
