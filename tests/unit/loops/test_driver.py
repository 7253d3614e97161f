"""The driver: one pass runs the pipelines in order; a wake-up schedules at once."""

from __future__ import annotations

from gpupool.executors.task import Observed, PollResult
from gpupool.loops import Control
from gpupool.store.db import Database
from tests.support.clock import ManualClock
from tests.unit.loops.conftest import ScriptedExecutor, job_row, submit


def test_a_pass_launches_then_the_next_records_the_end(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = submit(db, clock)
    assert control.driver.run_once() is False  # scheduled and launched; nothing changed yet
    assert [task.job_id for task in executor.tasks] == [job_id]
    executor.observe(job_id, 1, PollResult(Observed.EXITED, exit_code=0, started_at=1.0))
    assert control.driver.run_once(force_schedule=False) is True
    assert job_row(db, job_id).status == "succeeded"
    assert control.face.stats.snapshot().cycle_count == 2  # an attempt changed: a cycle


def test_the_face_wakes_the_driver_and_reads_the_pipelines(
    db: Database, clock: ManualClock, control: Control
) -> None:
    submit(db, clock, gpus=4)
    waiting = submit(db, clock, gpus=4)
    control.driver.run_once()
    assert set(control.face.pending_reasons) == {waiting}
    assert [node.name for node in control.face.recent_nodes()] == ["node-a"]
    control.face.wake()
    assert control.driver._wait(0) is True  # woken: the next pass schedules at once
    control.driver.stop()
    control.face.wake()  # stopped: a wake does nothing
