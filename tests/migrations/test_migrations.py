"""Migrations: the migrated schema equals the models; downgrade works; mismatches are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from gpupool.errors import SchemaMismatch
from gpupool.store import db as store
from gpupool.store.models import Base


def test_the_migrated_schema_equals_the_models(database_url: str) -> None:
    store.upgrade(database_url)
    database = store.Database(database_url)
    with database.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    assert store.current_revision(database.engine) == store.head_revision()
    database.dispose()


def test_downgrade_to_base_removes_every_table(database_url: str) -> None:
    store.upgrade(database_url)
    store.downgrade(database_url, "base")
    database = store.Database(database_url)
    assert set(inspect(database.engine).get_table_names()) <= {"alembic_version"}
    database.dispose()


def test_prepare_creates_an_empty_database_and_refuses_another_revision(database_url: str) -> None:
    database = store.Database(database_url)
    store.prepare(database)
    assert store.current_revision(database.engine) == store.head_revision()
    store.prepare(database)  # at head: nothing to do
    with database.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = 'future'"))
    with pytest.raises(SchemaMismatch, match="gpupool db upgrade"):
        store.prepare(database)
    database.dispose()


def test_the_server_refuses_to_start_on_a_schema_mismatch(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gpupool.db'}"
    store.upgrade(url)
    store.downgrade(url, "base")
    database = store.Database(url)
    with database.engine.begin() as connection:
        connection.execute(text("CREATE TABLE stray (id INTEGER)"))
    database.dispose()
    env = {"GPUPOOL_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", "server", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "gpupool db upgrade" in done.stderr
    upgraded = subprocess.run(
        [sys.executable, "-m", "gpupool", "db", "upgrade"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert list(tmp_path.glob("gpupool.db.bak-*")), "the SQLite file is backed up before migrating"


def test_upgrading_a_database_with_jobs_gives_them_the_policy_defaults(database_url: str) -> None:
    store.upgrade(database_url, "0001")
    database = store.Database(database_url)
    with database.engine.begin() as connection:
        connection.execute(text("INSERT INTO teams (id, name, created_at) VALUES (1, 'ml', 0)"))
        connection.execute(
            text(
                "INSERT INTO users (id, name, role, disabled, created_at) "
                "VALUES (1, 'ann', 'member', false, 0)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO jobs (id, user_id, team_id, spec, status, priority, gpus, "
                "submitted_at, attempts) VALUES (1, 1, 1, '{}', 'pending', 0, 1, 0, 0)"
            )
        )
    database.dispose()
    store.upgrade(database_url)
    database = store.Database(database_url)
    with database.engine.connect() as connection:
        team = connection.execute(text("SELECT guarantee, gpu_limit, weight FROM teams")).one()
        job = connection.execute(
            text("SELECT preemptible, attained, queued_at, checkpoint_at, preemptions FROM jobs")
        ).one()
    database.dispose()
    assert (team.guarantee in ({}, "{}"), team.gpu_limit, team.weight) == (True, None, 1)
    assert (bool(job.preemptible), job.attained, job.queued_at, job.preemptions) == (
        True,
        0,
        None,
        0,
    )


def test_0003_gives_existing_users_weight_1_and_refuses_a_weight_of_0(database_url: str) -> None:
    store.upgrade(database_url, "0002")
    database = store.Database(database_url)
    with database.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO users (id, name, role, disabled, created_at) "
                "VALUES (1, 'ann', 'member', false, 0)"
            )
        )
        connection.execute(text("INSERT INTO teams (id, name, created_at) VALUES (1, 'ml', 0)"))
        connection.execute(text("INSERT INTO memberships (user_id, team_id) VALUES (1, 1)"))
    database.dispose()
    store.upgrade(database_url, "0003")
    database = store.Database(database_url)
    with database.engine.connect() as connection:
        assert connection.execute(text("SELECT name, weight FROM users")).one() == ("ann", 1)
        assert connection.execute(text("SELECT count(*) FROM memberships")).scalar() == 1
    for weight in (0, -1):
        with pytest.raises(IntegrityError), database.engine.begin() as connection:
            connection.execute(text("UPDATE users SET weight = :w"), {"w": weight})
    database.dispose()
    store.downgrade(database_url, "0002")
    database = store.Database(database_url)
    columns = {column["name"] for column in inspect(database.engine).get_columns("users")}
    with database.engine.connect() as connection:
        assert connection.execute(text("SELECT name FROM users")).scalar() == "ann"
    database.dispose()
    assert "weight" not in columns


def test_0004_records_todays_quotas_as_the_earliest_known(database_url: str) -> None:
    store.upgrade(database_url, "0003")
    database = store.Database(database_url)
    with database.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO teams (id, name, created_at, guarantee, gpu_limit, weight) "
                """VALUES (1, 'ml', 0, '{"A100": 2}', 4, 2), (2, 'cv', 0, '{}', NULL, 1)"""
            )
        )
    database.dispose()
    store.upgrade(database_url, "0004")
    database = store.Database(database_url)
    with database.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT team_id, at, gpu_limit, weight FROM quota_changes ORDER BY team_id")
        ).all()
        assert connection.execute(text("SELECT count(*) FROM pool_changes")).scalar() == 0
    database.dispose()
    assert [(r.team_id, r.gpu_limit, r.weight) for r in rows] == [(1, 4, 2), (2, None, 1)]
    assert all(r.at > 0 for r in rows), "recorded at the upgrade"
    store.downgrade(database_url, "0003")
    database = store.Database(database_url)
    tables = set(inspect(database.engine).get_table_names())
    database.dispose()
    assert not tables & {"quota_changes", "pool_changes"} and "teams" in tables


def test_0008_marks_renamed_teams_deleted_and_frees_their_names(database_url: str) -> None:
    store.upgrade(database_url, "0007")
    database = store.Database(database_url)
    with database.engine.begin() as connection:
        connection.execute(
            text("INSERT INTO teams (id, name, created_at) VALUES (1, 'ml~1', 0), (2, 'cv', 0)")
        )
        connection.execute(
            text(
                "INSERT INTO users (id, name, role, disabled, created_at) "
                "VALUES (1, 'ann', 'member', false, 0)"
            )
        )
        connection.execute(text("INSERT INTO memberships (user_id, team_id) VALUES (1, 2)"))
    database.dispose()
    store.upgrade(database_url, "0008")
    database = store.Database(database_url)
    with database.engine.begin() as connection:
        rows = connection.execute(text("SELECT id, name, deleted_at FROM teams ORDER BY id")).all()
        assert connection.execute(text("SELECT admin FROM memberships")).scalar() in (False, 0)
        connection.execute(text("INSERT INTO teams (id, name, created_at) VALUES (3, 'ml', 0)"))
    with pytest.raises(IntegrityError), database.engine.begin() as connection:
        connection.execute(text("INSERT INTO teams (id, name, created_at) VALUES (4, 'ml', 0)"))
    database.dispose()
    assert [(r.id, r.name, r.deleted_at is not None) for r in rows] == [
        (1, "ml", True),
        (2, "cv", False),
    ]
    store.downgrade(database_url, "0007")
    database = store.Database(database_url)
    with database.engine.connect() as connection:
        names = connection.execute(text("SELECT name FROM teams ORDER BY id")).scalars().all()
    database.dispose()
    assert names == ["ml~1", "cv", "ml"]
