"""The launch pipeline: claim in one transaction, launch outside it, record failures."""

from __future__ import annotations

from sqlalchemy import select

from gpupool.executors.fake import FailingExecutor
from gpupool.loops import Control
from gpupool.services import jobs
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel
from tests.support.clock import ManualClock
from tests.unit.loops.conftest import (
    ADMIN,
    ScriptedExecutor,
    control_of,
    job_row,
    placements,
    reasons,
    submit,
)


def attempts(db: Database) -> list[tuple[int, int, str]]:
    with db.reader() as session:
        columns = (AttemptModel.job_id, AttemptModel.number, AttemptModel.status)
        rows = session.execute(select(*columns))
        return sorted(tuple(row) for row in rows)


def test_every_placed_job_gets_its_attempt_recorded_before_its_launch(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    first, second = submit(db, clock), submit(db, clock, gpus=2)
    claimed = control.launch.claim(placements(db, clock))
    assert attempts(db) == [(first, 1, "starting"), (second, 1, "starting")]
    assert executor.tasks == []  # recorded and committed, nothing launched yet
    assert [c.task.job_id for c in claimed] == [first, second]
    assert [len(c.task.gpu_uuids) for c in claimed] == [1, 2]
    assert all(c.task.user == "admin" for c in claimed)
    assert job_row(db, first).status == "starting"
    assert reasons(db, first)[-1] == "Placed"


def test_a_run_launches_the_claimed_attempts_and_watches_them(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = submit(db, clock)
    control.launch.run(placements(db, clock))
    assert [task.job_id for task in executor.tasks] == [job_id]
    [active] = list(control.actives)
    assert (active.job_id, active.number) == (job_id, 1)
    assert control.face.stats.snapshot().starts == {"launched": 1, "launch_failed": 0}


def test_a_job_cancelled_since_the_snapshot_is_not_claimed(
    db: Database, clock: ManualClock, control: Control
) -> None:
    job_id = submit(db, clock)
    found = placements(db, clock)
    with db.session() as session:
        jobs.cancel(session, ADMIN, job_id, clock.now())
    assert control.launch.claim(found) == []
    assert attempts(db) == []


def test_a_failed_launch_fails_its_job_and_a_storage_full_one_requeues_it(
    db: Database, settings: Settings, clock: ManualClock
) -> None:
    job_id = submit(db, clock)
    control_of(db, FailingExecutor(), settings, clock).launch.run(placements(db, clock))
    assert attempts(db) == [(job_id, 1, "launch_failed")]
    assert job_row(db, job_id).status == "failed"

    other = submit(db, clock)
    full = FailingExecutor(reason="storage_full", user_message="the disk is full")
    control_of(db, full, settings, clock).launch.run(placements(db, clock))
    assert job_row(db, other).status == "pending"
    assert reasons(db, other)[-1] == "Requeued"
