"""The scheduling pipeline: decisions carried out, reasons written only when they change."""

from __future__ import annotations

from gpupool.domain.isolation import IsolationStatus
from gpupool.loops import Control
from gpupool.store.db import Database
from tests.support.clock import ManualClock
from tests.unit.loops.conftest import ScriptedExecutor, job_row, reasons, submit


def test_a_cycle_launches_what_fits_and_says_why_the_rest_waits(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    running = submit(db, clock, gpus=4)
    waiting = submit(db, clock, gpus=4)
    control.scheduling.run()
    assert [task.job_id for task in executor.tasks] == [running]
    assert job_row(db, waiting).status == "pending"
    assert waiting in control.face.pending_reasons
    said = reasons(db, waiting)
    control.scheduling._explained_at = float("-inf")  # explain again at once
    control.scheduling.run()
    assert reasons(db, waiting) == said  # the same reason: no new event


def test_without_the_isolation_it_needs_no_job_starts_and_each_says_why(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = submit(db, clock)
    cannot = IsolationStatus(
        mode="unavailable", runs_jobs=False, identity="root", message="no user namespaces"
    )
    control.scheduling.isolation = lambda: cannot
    control.scheduling.run()
    assert executor.tasks == []
    assert job_row(db, job_id).message == "no user namespaces"
    assert reasons(db, job_id)[-1] == "IsolationUnavailable"
