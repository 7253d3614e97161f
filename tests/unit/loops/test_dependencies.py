"""The dependencies pipeline in the control pass: a job that waits is never launched, and the
pass that records the end of the job it waits for also queues and launches it (no tick to
wait for); an end that can never satisfy it cancels it, and its own waiters, in that pass."""

from __future__ import annotations

from gpupool.executors.task import Observed, PollResult
from gpupool.loops import Control
from gpupool.store.db import Database
from tests.support.clock import ManualClock
from tests.unit.loops.conftest import ScriptedExecutor, job_row, reasons, submit


def launched(executor: ScriptedExecutor) -> list[int]:
    return [task.job_id for task in executor.tasks]


def test_the_pass_that_records_an_end_starts_the_job_waiting_for_it(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    prep = submit(db, clock)
    train = submit(db, clock, depends_on=[prep])
    control.driver.run_once()
    assert launched(executor) == [prep]
    assert (job_row(db, train).reason, job_row(db, train).waiting) == ("Dependency", True)
    assert train not in control.face.pending_reasons  # the scheduler never saw it
    executor.observe(prep, 1, PollResult(Observed.EXITED, exit_code=0, started_at=1.0))
    assert control.driver.run_once(force_schedule=False) is True
    assert launched(executor) == [prep, train]
    assert reasons(db, train)[:3] == ["Submitted", "Queued", "Placed"]


def test_a_failed_end_cancels_the_chain_in_one_pass(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    prep = submit(db, clock)
    train = submit(db, clock, depends_on=[prep])
    evaluate = submit(db, clock, depends_on=[train])
    cleanup = submit(db, clock, depends_on=[f"afternotok:{prep}"])
    control.driver.run_once()
    executor.observe(prep, 1, PollResult(Observed.EXITED, exit_code=2, started_at=1.0))
    control.driver.run_once(force_schedule=False)
    for job_id in (train, evaluate):
        row = job_row(db, job_id)
        assert (row.status, row.reason, row.waiting) == (
            "cancelled",
            "DependencyNeverSatisfied",
            False,
        )
    assert launched(executor) == [prep, cleanup]
