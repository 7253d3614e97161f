"""The queries job dependencies add to every scheduling pass stay cheap on SQLite: the
waiting jobs are found through the partial index ix_jobs_waiting (not a scan of every job),
and the snapshot's pending jobs still through the status index."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Select, select, text

from gpupool.domain.jobs import JobStatus
from gpupool.services.jobs._dependencies import WAITING_ROWS
from gpupool.store import db as store
from gpupool.store.models import JobModel


def query_plan(database: store.Database, query: Select) -> str:
    with database.engine.connect() as connection:
        sql = str(query.compile(connection, compile_kwargs={"literal_binds": True}))
        rows = connection.execute(text(f"EXPLAIN QUERY PLAN {sql}")).all()
    return "\n".join(str(row[-1]) for row in rows)


def test_waiting_jobs_are_found_through_the_partial_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    store.upgrade(url)
    database = store.Database(url)
    try:
        waiting = query_plan(database, WAITING_ROWS)
        assert "USING INDEX ix_jobs_waiting" in waiting, waiting
        pending = query_plan(
            database,
            select(JobModel.id).where(
                JobModel.status == JobStatus.PENDING.value,
                JobModel.cancel_requested_at.is_(None),
                JobModel.waiting.is_(False),
            ),
        )
        assert "USING INDEX ix_jobs_status_team" in pending, pending
    finally:
        database.dispose()
