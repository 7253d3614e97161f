"""A database that cannot grow: the unit of work raises StorageFull, nothing of it is kept,
and the next one succeeds once there is room."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg import errors as pg_errors
from sqlalchemy import event, func, select
from sqlalchemy.exc import OperationalError

from gpupool.errors import StorageFull
from gpupool.store import db as store
from gpupool.store.models import EventModel


def test_a_full_sqlite_file_raises_storage_full_and_keeps_nothing(tmp_path: Path) -> None:
    database = store.Database(f"sqlite:///{tmp_path / 'full.db'}")
    store.prepare(database)
    limit = {"pages": None}

    @event.listens_for(database.engine, "connect")
    def _cap(connection, _record) -> None:  # noqa: ANN001 - DB-API connection
        if limit["pages"]:
            connection.execute(f"PRAGMA max_page_count = {limit['pages']}")

    database.engine.dispose()  # new connections get the cap
    with database.engine.connect() as connection:
        limit["pages"] = connection.exec_driver_sql("PRAGMA page_count").scalar()
    database.engine.dispose()
    with pytest.raises(StorageFull, match="disk is full"), database.session() as session:
        session.add_all(EventModel(at=0.0, reason="X", message="m" * 4000) for _ in range(50))
    with database.reader() as session:
        assert session.scalar(select(func.count()).select_from(EventModel)) == 0

    limit["pages"] = None
    database.engine.dispose()
    with database.session() as session:
        session.add(EventModel(at=0.0, reason="X", message="fits"))
    with database.reader() as session:
        assert session.scalar(select(func.count()).select_from(EventModel)) == 1
    database.dispose()


def test_postgresql_disk_full_is_storage_full() -> None:
    error = OperationalError("INSERT ...", {}, pg_errors.DiskFull("could not extend file"))
    assert store.storage_full(error)
    other = OperationalError("SELECT 1", {}, pg_errors.AdminShutdown("terminating"))
    assert not store.storage_full(other)
