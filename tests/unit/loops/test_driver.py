"""The driver: one pass runs the pipelines in order; a wake-up schedules at once."""

from __future__ import annotations

import os
import select

from gpupool.executors.task import Observed, PollResult
from gpupool.loops import Control
from gpupool.loops.driver import MAX_REST, SUBMIT_REST_FACTOR
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


def test_a_wake_after_an_idle_wait_is_not_held_back(control: Control) -> None:
    """Nothing came while the pass ran: the next pass may start as soon as woken (a lone
    submit waits for no batch window); submits that came during it (a stream) wait a few
    times as long as it took, so that the API keeps its share; ended jobs as long only."""
    driver = control.driver
    assert driver.rest_after(0.01, ended_work=False) == 0.0
    control.face.wake()
    assert driver.rest_after(0.01, ended_work=False) == 0.01 * SUBMIT_REST_FACTOR
    assert driver.rest_after(0.01, ended_work=True) == 0.01
    assert driver.rest_after(10.0, ended_work=False) == MAX_REST
    assert driver._wait(0) is True  # still pending: the next wait takes it
    assert driver.rest_after(0.01, ended_work=False) == 0.0


def test_attempts_that_changed_during_a_pass_are_served_at_once(
    control: Control, executor: ScriptedExecutor
) -> None:
    """A job that ended while a pass ran left GPUs idle: the next pass comes at once (the
    wait before it finds the change there, and takes it)."""
    read, write = os.pipe()
    executor.change_fd = lambda: read  # type: ignore[method-assign]
    executor.clear_changes = lambda: os.read(read, 4096)  # type: ignore[method-assign]
    try:
        os.write(write, b"!")  # a runner rewrote its state during the pass
        assert control.driver.rest_after(0.02, ended_work=True) == 0.0
        assert control.driver._wait(5.0) is False  # a change, not a wake
        assert select.select([read], [], [], 0)[0] == []  # taken: the next wait sleeps
    finally:
        os.close(read)
        os.close(write)
