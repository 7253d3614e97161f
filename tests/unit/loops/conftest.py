"""The control pipelines on a real SQLite database and a fake executor, one pass at a time
(no control thread): a test calls each pipeline's ``run`` itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.discovery import discover_node
from gpupool.domain.jobs import JobSpec, Role
from gpupool.executors.base import Executor, Handle
from gpupool.executors.fake import NeverStartsExecutor
from gpupool.executors.task import Observed, PollResult
from gpupool.loops import Control
from gpupool.scheduler import schedule
from gpupool.scheduler.types import Placement
from gpupool.services import cluster, identity, jobs
from gpupool.services.core import Principal
from gpupool.services.scheduling import SnapshotBuilder
from gpupool.settings import Settings
from gpupool.store.db import Database, prepare
from gpupool.store.models import EventModel, JobModel
from tests.support.clock import ManualClock
from tests.support.platform import make_settings

ADMIN = Principal(user_id=1, name="admin", role=Role.ADMIN, team_ids=frozenset({1}))


class ScriptedExecutor(NeverStartsExecutor):
    """Launches nothing; each attempt is observed as the test says (``observe``)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.seen: dict[tuple[int, int], PollResult] = {}
        self.stopped: list[tuple[int, int]] = []
        self.released: list[tuple[int, int]] = []

    def observe(self, job_id: int, attempt: int, result: PollResult) -> None:
        self.seen[(job_id, attempt)] = result

    def poll(self, handle: Handle) -> PollResult:
        return self.seen.get((handle.job_id, handle.attempt), PollResult(Observed.STARTING))

    def stop(self, handle: Handle, grace_seconds: float) -> None:
        self.stopped.append((handle.job_id, handle.attempt))

    def release(self, handle: Handle) -> None:
        self.released.append((handle.job_id, handle.attempt))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    made = make_settings(tmp_path / "data")
    made.data_dir.mkdir(parents=True, exist_ok=True)  # make_settings made it
    return made


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db(settings: Settings, clock: ManualClock) -> Iterator[Database]:
    database = Database(settings.database)
    prepare(database)
    with database.session() as session:
        identity.bootstrap(session, clock.now())
        cluster.register(session, discover_node(settings), clock.now())
    yield database
    database.dispose()


@pytest.fixture
def executor(tmp_path: Path) -> ScriptedExecutor:
    return ScriptedExecutor(tmp_path / "jobs")


def control_of(db: Database, executor: Executor, settings: Settings, clock: ManualClock) -> Control:
    return Control.open(db, executor, settings, clock)


@pytest.fixture
def control(
    db: Database, executor: ScriptedExecutor, settings: Settings, clock: ManualClock
) -> Control:
    return control_of(db, executor, settings, clock)


def submit(db: Database, clock: ManualClock, gpus: int = 1, **spec: object) -> int:
    with db.session() as session:
        job_spec = JobSpec(command=["true"], resources={"gpus": gpus}, **spec)
        nodes = SnapshotBuilder().nodes.capacities(session)
        return jobs.submit(session, ADMIN, job_spec, nodes, clock.now()).id


def job_row(db: Database, job_id: int) -> JobModel:
    with db.reader() as session:
        row = session.get(JobModel, job_id)
        session.expunge(row)
        return row


def reasons(db: Database, job_id: int) -> list[str]:
    with db.reader() as session:
        return list(
            session.scalars(
                EventModel.__table__.select()
                .with_only_columns(EventModel.reason)
                .where(EventModel.job_id == job_id)
                .order_by(EventModel.id)
            )
        )


def placements(db: Database, clock: ManualClock) -> list[Placement]:
    """What the real scheduler places now."""
    with db.reader() as session:
        return schedule(SnapshotBuilder().build(session, clock.now()), clock).placements
