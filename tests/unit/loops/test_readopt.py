"""Re-adoption at start: launched attempts are taken back, never-launched ones requeued."""

from __future__ import annotations

from gpupool.executors.task import Observed
from gpupool.loops import Control
from gpupool.settings import Settings
from gpupool.store.db import Database
from tests.support.clock import ManualClock
from tests.unit.loops.conftest import (
    ScriptedExecutor,
    control_of,
    job_row,
    placements,
    reasons,
    submit,
)


def test_an_attempt_recorded_but_never_launched_is_requeued(
    db: Database, settings: Settings, clock: ManualClock, control: Control
) -> None:
    job_id = submit(db, clock)
    control.launch.claim(placements(db, clock))  # then the server dies before the launch
    restarted = control_of(db, ScriptedExecutor(settings.jobs_dir), settings, clock)
    restarted.readopt.run()
    assert list(restarted.actives) == []
    assert job_row(db, job_id).status == "pending"
    assert reasons(db, job_id)[-1] == "Requeued"


def test_a_launched_attempt_is_taken_back_as_it_was_last_seen(
    db: Database, settings: Settings, clock: ManualClock, control: Control
) -> None:
    job_id = submit(db, clock, grace_period_seconds=7)
    control.launch.run(placements(db, clock))
    [active] = list(control.actives)
    with db.session() as session:  # what reconcile records with the attempt's first change
        from gpupool.store.models import AttemptModel

        session.get(AttemptModel, active.attempt_id).executor_state = {
            "job_id": job_id,
            "attempt": 1,
            "state": {"stopped": False},
        }
    restarted = control_of(db, ScriptedExecutor(settings.jobs_dir), settings, clock)
    restarted.readopt.run()
    [again] = list(restarted.actives)
    assert (again.job_id, again.number, again.observed) == (job_id, 1, Observed.STARTING)
    assert again.grace == 7
    assert reasons(db, job_id)[-1] == "Readopted"
