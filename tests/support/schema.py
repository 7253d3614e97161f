"""Fresh databases already at the schema's head, without running every migration again.

Running the migrations on an empty database takes about a second on SQLite (each batch
migration copies its table) and half of one on PostgreSQL, and the tests make hundreds of
fresh databases: the servers they start, and the platforms they open in-process. So the
migrations run once per test process into a template, and a fresh database is a copy of it:
SQLite's file through its backup API, PostgreSQL's ``CREATE DATABASE ... TEMPLATE``. The
copy is the migrated schema itself, not the models' (which may differ in what Alembic does
not compare: partial indexes, server defaults); the server sees a database at head with no
rows, as the first start of a real one sees after it migrated. ``tests/migrations`` keeps
empty databases and runs the migrations for real (its conftest)."""

from __future__ import annotations

import atexit
import functools
import shutil
import sqlite3
import tempfile
from pathlib import Path

from gpupool.store import db

SQLITE_NAME = "gpupool.db"  # the server's file in its data directory (Settings.database)


@functools.cache
def _sqlite_template() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="gpupool-schema-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "template.db"
    db.upgrade(f"sqlite:///{path}")
    return path


def migrated_sqlite(path: Path) -> str:
    """A new SQLite database at ``path`` (which must not exist yet), at the schema's head;
    its URL."""
    if path.exists():
        raise FileExistsError(f"{path} exists: a migrated copy only makes a new database")
    path.parent.mkdir(parents=True, exist_ok=True)
    source, target = sqlite3.connect(_sqlite_template()), sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    return f"sqlite:///{path}"


def seed_data_dir(data_dir: Path) -> None:
    """Give a server's data directory that has no database yet a migrated one."""
    if not (data_dir / SQLITE_NAME).exists():
        migrated_sqlite(data_dir / SQLITE_NAME)
