"""The migrations' own tests run them for real: on empty databases, not on the migrated
copies every other test gets (tests.support.schema)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.postgres import PostgresServer


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, or a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()
