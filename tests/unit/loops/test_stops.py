"""The stops pipeline: recorded in one transaction, then sent once."""

from __future__ import annotations

from gpupool.domain.jobs import Reason, StopReason
from gpupool.loops import Control
from gpupool.scheduler.types import Preemption
from gpupool.services import jobs
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel
from tests.support.clock import ManualClock
from tests.unit.loops.conftest import ADMIN, ScriptedExecutor, placements, reasons, submit


def launch_one(db: Database, clock: ManualClock, control: Control, **spec: object) -> int:
    job_id = submit(db, clock, **spec)
    control.launch.run(placements(db, clock))
    return job_id


def stop_reason(db: Database, job_id: int) -> str | None:
    with db.reader() as session:
        return session.query(AttemptModel.stop_reason).filter_by(job_id=job_id).scalar()


def test_a_cancelled_job_is_stopped_once(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = launch_one(db, clock, control)
    with db.session() as session:
        jobs.cancel(session, ADMIN, job_id, clock.now())
    control.stops.run()
    control.stops.run()
    assert executor.stopped == [(job_id, 1)]
    assert stop_reason(db, job_id) == StopReason.CANCELLED.value


def test_an_attempt_past_its_max_runtime_is_stopped(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = launch_one(db, clock, control, max_runtime_seconds=10)
    [active] = list(control.actives)
    active.started_at = clock.now()
    control.stops.run()
    assert executor.stopped == []
    clock.advance(11)
    control.stops.run()
    assert executor.stopped == [(job_id, 1)]
    assert stop_reason(db, job_id) == StopReason.MAX_RUNTIME.value


def test_a_preemption_is_recorded_with_its_event_then_sent(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = launch_one(db, clock, control)
    control.stops.preempt([Preemption(job_id, 99, Reason.PREEMPTED, "job 99 needs the GPUs")])
    assert executor.stopped == [(job_id, 1)]
    assert stop_reason(db, job_id) == StopReason.PREEMPTED.value
    assert reasons(db, job_id)[-1] == "Preempted"


def test_a_stop_recorded_by_another_thread_is_sent_at_the_next_pass(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = launch_one(db, clock, control)
    with db.session() as session:
        session.query(AttemptModel).filter_by(job_id=job_id).update(
            {"stop_reason": StopReason.STORAGE_QUOTA.value}
        )
    control.stops.run()
    assert executor.stopped == []  # not told yet
    control.face.stops_recorded()
    control.stops.run()
    assert executor.stopped == [(job_id, 1)]


def test_cancels_are_read_when_the_loop_is_woken_or_a_second_passed(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    job_id = launch_one(db, clock, control)
    now = [100.0]
    control.stops.monotonic = lambda: now[0]
    control.stops.run()  # the first pass reads them
    with db.session() as session:
        jobs.flag_cancel(session, job_id, clock.now())
    control.stops.run()
    assert executor.stopped == []  # not woken, and read less than a second ago
    control.face.wake()  # what a cancel does
    control.stops.run()
    assert executor.stopped == [(job_id, 1)]

    other = launch_one(db, clock, control)
    with db.session() as session:
        jobs.flag_cancel(session, other, clock.now())
    now[0] += 1.0  # no wake: the next reading a second later finds it all the same
    control.stops.run()
    assert executor.stopped == [(job_id, 1), (other, 1)]
