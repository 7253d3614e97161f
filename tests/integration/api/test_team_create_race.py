"""Two servers creating a team of one name at once, on SQLite and on PostgreSQL: the one
that loses the race gets the team-exists 409, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event, insert
from sqlalchemy.engine import Connection

import gpupool.services.identity._quotas as quotas
from gpupool.store.db import Database
from gpupool.store.models import TeamModel
from tests.support.platform import make_settings, running_app

TEAMS = "/api/v1/teams"


def test_the_second_of_two_racing_creates_gets_409(tmp_path: Path, database_url: str) -> None:
    settings = make_settings(tmp_path / "data", database_url)
    with running_app(settings) as (client, platform), rival_creates("ml", platform.db):
        answer = client.post(TEAMS, json={"name": "ml"})
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert error["code"] == "conflict"
        assert "team 'ml' already exists" in error["message"]
        # the rival's team stays (on SQLite it went in with the refused transaction)
        kept = 0 if platform.db.is_sqlite else 1
        assert [t["name"] for t in client.get(TEAMS).json()].count("ml") == kept


@contextmanager
def rival_creates(name: str, db: Database) -> Iterator[None]:
    """Another server creates team ``name`` after this one found the name free and before it
    inserts its row. On PostgreSQL the rival is a second server's own database connection that
    commits; SQLite lets one writer in at a time, so there the rival's row goes in on this
    writer's connection (what the second writer would meet, were SQLite to interleave)."""
    rival = None if db.is_sqlite else Database(db.url)
    raced: list[str] = []

    def before_insert(_mapper: object, connection: Connection, team: TeamModel) -> None:
        if team.name != name or raced:
            return
        raced.append(name)
        if rival is None:
            connection.execute(insert(TeamModel).values(name=name, created_at=0.0))
            return
        with rival.session() as session:
            quotas.create_team(session, name, quotas.Quota({}, None, 1.0), [], 0.0)

    event.listen(TeamModel, "before_insert", before_insert)
    try:
        yield
        assert raced, "the rival never ran: the create path no longer inserts a TeamModel"
    finally:
        event.remove(TeamModel, "before_insert", before_insert)
        if rival is not None:
            rival.dispose()
