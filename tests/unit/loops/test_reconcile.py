"""Reconcile: observations recorded in one transaction, marked only once committed."""

from __future__ import annotations

import pytest

from gpupool.errors import StorageFull
from gpupool.executors.task import Observed, PollResult
from gpupool.loops import Control
from gpupool.store.db import Database
from tests.support.clock import ManualClock
from tests.unit.loops.conftest import ScriptedExecutor, job_row, placements, reasons, submit


def launched(
    db: Database, clock: ManualClock, control: Control, count: int = 1, **spec: object
) -> list[int]:
    ids = [submit(db, clock, **spec) for _ in range(count)]
    control.launch.run(placements(db, clock))
    return ids


def test_nothing_changed_records_nothing(
    db: Database, clock: ManualClock, control: Control
) -> None:
    launched(db, clock, control)
    assert control.reconcile.run() is False


def test_a_start_then_an_exit_are_recorded_and_the_attempt_forgotten(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    [job_id] = launched(db, clock, control)
    executor.observe(job_id, 1, PollResult(Observed.RUNNING, started_at=clock.now()))
    assert control.reconcile.run() is True
    assert job_row(db, job_id).status == "running"
    executor.observe(job_id, 1, PollResult(Observed.EXITED, exit_code=0, ended_at=clock.now()))
    assert control.reconcile.run() is True
    assert job_row(db, job_id).status == "succeeded"
    assert reasons(db, job_id)[-2:] == ["Started", "Exited"]
    assert list(control.actives) == [] and executor.released == [(job_id, 1)]
    assert control.face.stats.snapshot().ends == {"succeeded": 1}


def test_many_attempts_end_in_one_pass(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    ids = launched(db, clock, control, count=3)
    for job_id in ids:
        executor.observe(job_id, 1, PollResult(Observed.EXITED, exit_code=1, started_at=1.0))
    assert control.reconcile.run() is True
    assert [job_row(db, job_id).status for job_id in ids] == ["failed"] * 3


def test_a_pass_that_cannot_commit_is_done_again_by_the_next(
    db: Database,
    clock: ManualClock,
    control: Control,
    executor: ScriptedExecutor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [job_id] = launched(db, clock, control)
    executor.observe(job_id, 1, PollResult(Observed.RUNNING, started_at=clock.now()))

    def full() -> None:
        raise StorageFull("the disk is full")

    with monkeypatch.context() as patched:
        patched.setattr(db, "session", full)
        with pytest.raises(StorageFull):
            control.reconcile.run()
    [active] = list(control.actives)
    assert active.observed == Observed.STARTING  # not marked: the commit never happened
    assert control.reconcile.run() is True
    assert job_row(db, job_id).status == "running"


def test_a_lost_attempt_counts_against_the_job_s_retries(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    [job_id] = launched(db, clock, control, retries=1)
    executor.observe(job_id, 1, PollResult(Observed.RUNNING, started_at=clock.now()))
    control.reconcile.run()
    executor.observe(job_id, 1, PollResult(Observed.LOST, message="the runner vanished"))
    assert control.reconcile.run() is True
    job = job_row(db, job_id)
    assert job.status == "pending"
    assert job.message == "the runner vanished; requeued (retry 1 of 1)"
    assert control.face.stats.snapshot().ends == {"requeued": 1}
