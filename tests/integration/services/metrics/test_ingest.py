"""The metric ingest pipeline's cursor, and what services read of the points (a real database)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.executors.local import LocalExecutor
from gpupool.loops.ingest import HURRIED_SECONDS, INTERVAL_SECONDS, Ingest
from gpupool.services.metrics import final_values, gpu_busy
from gpupool.store.db import Database, prepare
from gpupool.store.models import (
    AttemptModel,
    JobMetricModel,
    JobModel,
    MetricCursorModel,
    TeamModel,
    UserModel,
)
from tests.support.clock import ManualClock


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    """On SQLite and on PostgreSQL (the window functions and bulk inserts of both)."""
    database = Database(database_url)
    prepare(database)
    with database.session() as session:
        team = TeamModel(name="ml", created_at=0.0)
        user = UserModel(name="ada", role="member", created_at=0.0)
        session.add_all([team, user])
        session.flush()
        for job_id in (1, 2):
            session.add(
                JobModel(
                    id=job_id,
                    user_id=user.id,
                    team_id=team.id,
                    spec={},
                    status="running",
                    submitted_at=0.0,
                )
            )
    yield database
    database.dispose()


class Attempts:
    """Attempts of job 1 whose runner's records the test writes by hand."""

    def __init__(self, db: Database, root: Path) -> None:
        self.db, self.root = db, root
        self.executor = LocalExecutor(root, fork_server=False)

    def launch(self, number: int, job_id: int = 1) -> Path:
        attempt_dir = self.root / str(job_id) / "attempts" / str(number)
        attempt_dir.mkdir(parents=True)
        state = {"job_id": job_id, "attempt": number, "state": {"attempt_dir": str(attempt_dir)}}
        with self.db.session() as session:
            session.add(
                AttemptModel(
                    job_id=job_id,
                    number=number,
                    node="n",
                    placement={},
                    executor_state=state,
                    status="running",
                    created_at=0.0,
                )
            )
        return attempt_dir / "metrics.jsonl"

    def end(self, number: int, at: float, job_id: int = 1) -> None:
        with self.db.session() as session:
            row = session.query(AttemptModel).filter_by(job_id=job_id, number=number).one()
            row.status, row.ended_at = "exited", at


def write(path: Path, *points: list[object], end: str = "\n") -> None:
    with path.open("a") as f:
        f.write("".join(json.dumps(p) + "\n" for p in points).rstrip("\n") + end)


def points(db: Database) -> list[tuple[int, str, int | None, float]]:
    with db.reader() as session:
        rows = session.query(JobMetricModel).order_by(JobMetricModel.id)
        return [(r.attempt, r.name, r.step, r.value) for r in rows]


def test_points_are_read_once_whole_lines_only_and_to_the_end(db: Database, tmp_path: Path) -> None:
    attempts = Attempts(db, tmp_path / "jobs")
    records = attempts.launch(1)
    clock = ManualClock(100.0)
    ingester = Ingest(db, attempts.executor, clock)
    write(records, ["loss", 0, 1.0, 0.5], ["loss", 1, 2.0, 0.25])
    records.open("a").write('["loss", 2, 3.0, ')  # a line the runner is still writing
    assert ingester.run_once() == 2
    assert ingester.run_once() == 0
    records.open("a").write("0.125]\n")
    assert ingester.run_once() == 1
    attempts.end(1, at=clock.now())
    assert ingester.run_once() == 0
    with db.reader() as session:
        cursor = session.get(MetricCursorModel, (1, 1))
        assert cursor.done and cursor.position == records.stat().st_size
    assert points(db) == [(1, "loss", 0, 0.5), (1, "loss", 1, 0.25), (1, "loss", 2, 0.125)]


def test_a_new_ingester_goes_on_from_the_cursor(db: Database, tmp_path: Path) -> None:
    """As after a server restart (or a kill -9 between two batches): nothing read twice."""
    attempts = Attempts(db, tmp_path / "jobs")
    records = attempts.launch(1)
    write(records, ["a", 0, 1.0, 1.0])
    assert Ingest(db, attempts.executor, ManualClock(1.0)).run_once() == 1
    write(records, ["a", 1, 2.0, 2.0])
    quick = attempts.launch(2)  # started and ended while no server ran
    write(quick, ["b", None, 3.0, 3.0], end="")  # its runner ended: a last line is whole
    attempts.end(2, at=5.0)
    restarted = Ingest(db, attempts.executor, ManualClock(1000.0))
    assert restarted.run_once() == 2
    assert sorted(points(db)) == [(1, "a", 0, 1.0), (1, "a", 1, 2.0), (2, "b", None, 3.0)]


def test_a_small_batch_size_reads_in_several_passes(db: Database, tmp_path: Path) -> None:
    attempts = Attempts(db, tmp_path / "jobs")
    records = attempts.launch(1)
    write(records, *[["x", i, float(i), float(i)] for i in range(50)], ["bad"], "not json")
    ingester = Ingest(db, attempts.executor, ManualClock(1.0), batch_bytes=100)
    while ingester.run_once():
        pass
    assert [p[2] for p in points(db)] == list(range(50))


def test_final_values_are_the_last_attempts_by_step_then_time(db: Database) -> None:
    rows = [
        (1, "loss", 5, 10.0, 0.9),
        (2, "loss", 3, 20.0, 0.5),
        (2, "loss", 7, 15.0, 0.2),  # the highest step wins over a later time
        (2, "acc", None, 21.0, 0.7),
        (2, "acc", None, 22.0, 0.8),
        (2, "gpu.0.utilization", None, 23.0, 40.0),
    ]
    with db.session() as session:
        for attempt, name, step, at, value in rows:
            session.add(
                JobMetricModel(job_id=1, attempt=attempt, name=name, step=step, at=at, value=value)
            )
    with db.reader() as session:
        assert final_values(session, 1) == {"loss": 0.2, "acc": 0.8}
        assert final_values(session, 2) == {}


def test_gpu_busy_reads_the_utilization_samples_since(db: Database) -> None:
    samples = [("gpu.0.utilization", 10.0, 0.0), ("gpu.1.utilization", 20.0, 35.0)]
    samples += [("gpu.0.utilization", 30.0, 0.0), ("gpu.0.memory_used", 40.0, 1e9)]
    samples += [("loss", 50.0, 3.0)]
    with db.session() as session:
        for name, at, value in samples:
            session.add(JobMetricModel(job_id=1, attempt=1, name=name, at=at, value=value))
        session.add(JobMetricModel(job_id=2, attempt=1, name="loss", at=1.0, value=1.0))
    with db.reader() as session:
        assert gpu_busy(session, 1, since=0.0) is True
        assert gpu_busy(session, 1, since=25.0) is False  # memory and loss do not count
        assert gpu_busy(session, 2, since=0.0) is None


def test_the_experiments_pipeline_is_told_when_an_ended_attempt_is_read_to_its_end(
    db: Database, tmp_path: Path
) -> None:
    """A trial completes once its last attempt was read to its end: that read tells the
    pipeline, though it kept no point (else the trial waited for the pipeline's next look)."""
    attempts = Attempts(db, tmp_path / "jobs")
    records = attempts.launch(1)
    told: list[int] = []
    ingester = Ingest(db, attempts.executor, ManualClock(100.0), on_kept=lambda: told.append(1))
    write(records, ["loss", 0, 1.0, 0.5])
    assert ingester.tick() == 1 and len(told) == 1
    assert ingester.tick() == 0 and len(told) == 1  # nothing new: nobody is told
    attempts.end(1, at=100.0)
    assert ingester.tick() == 0 and len(told) == 2  # read to its end: told
    assert ingester.tick() == 0 and len(told) == 2


def test_ingest_looks_sooner_while_points_are_awaited(db: Database, tmp_path: Path) -> None:
    attempts = Attempts(db, tmp_path / "jobs")
    awaited = [False]
    ingester = Ingest(db, attempts.executor, ManualClock(1.0), hurried=lambda: awaited[0])
    ingester.tick()
    assert ingester.rest(0.001) == INTERVAL_SECONDS
    awaited[0] = True
    assert ingester.rest(0.001) == HURRIED_SECONDS < INTERVAL_SECONDS
