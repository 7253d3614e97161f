"""The scheduler's snapshot read from a real database (SQLite and PostgreSQL): the policy
fields of pending and running jobs, team quotas, and decayed usage per user."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from sqlalchemy import update

import gpupool.services.identity._quotas as quotas
import gpupool.services.identity._users as users
from gpupool.domain.jobs import JobSpec, JobStatus, Role
from gpupool.scheduler.types import Placement
from gpupool.services import identity, jobs
from gpupool.services.core import Principal
from gpupool.services.scheduling import SnapshotBuilder
from gpupool.services.scheduling._snapshots import placement_json
from gpupool.services.scheduling._usage import UsageTracker, decayed_gpu_seconds
from gpupool.store.db import Database, prepare
from gpupool.store.models import AttemptModel, JobModel

HOUR = 3600.0
NOW = 1_000_000.0


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    prepare(database)
    with database.session() as session:
        identity.bootstrap(session, 0.0)
        quotas.create_team(session, "ml", quotas.Quota({"A100": 2}, 4.0, 2.0), [], 0.0)
        users.create_user(session, "ann", Role.MEMBER, ["ml"], 0.0)
    yield database
    database.dispose()


def ann(db: Database) -> Principal:
    with db.reader() as session:
        user = users.get_user(session, "ann")
        return Principal(user.id, user.name, Role.MEMBER, frozenset(t.id for t in user.teams))


def submit(db: Database, **fields: object) -> int:
    spec = JobSpec.model_validate({"command": ["true"], "resources": {"gpus": 1}} | fields)
    with db.session() as session:
        return jobs.submit(session, ann(db), spec, [], NOW - 10 * HOUR).id


def run(db: Database, job_id: int, started: float, ended: float | None = None) -> None:
    """Record an attempt of ``job_id`` on one GPU, as the control loop does."""
    placement = Placement(job_id, "node-a", (), 1.0, 0)
    with db.session() as session:
        job = session.get(JobModel, job_id)
        job.attempts += 1
        job.status = JobStatus.SUCCEEDED.value if ended else JobStatus.RUNNING.value
        job.placement = placement_json(placement) | {"gpus": [gpu(0)]}
        attempt = AttemptModel(
            job_id=job_id,
            number=job.attempts,
            node="node-a",
            placement=job.placement,
            status="exited" if ended else "running",
            created_at=started,
            started_at=started,
            ended_at=ended,
        )
        session.add(attempt)


def gpu(index: int) -> dict[str, object]:
    return {"uuid": f"GPU-{index}", "share": 1.0, "memory_bytes": 0}


def test_pending_jobs_carry_their_policy_and_a_requeued_job_is_read_again(db: Database) -> None:
    builder = SnapshotBuilder()
    job_id = submit(db, priority=7, preemptible=False, gpu_types=["A100"], max_runtime_seconds=60)
    with db.reader() as session:
        [pending] = builder.build(session, NOW).pending
    assert (pending.team, pending.user, pending.priority) == ("ml", "ann", 7)
    assert (pending.preemptible, pending.gpu_types, pending.max_runtime) == (False, ("A100",), 60)
    assert (pending.attained, pending.queued_at) == (0.0, None)

    run(db, job_id, started=NOW - 35)
    with db.reader() as session:
        assert builder.build(session, NOW).pending == ()
    with db.session() as session:  # preempted: back to the queue with its history
        session.execute(
            update(JobModel)
            .where(JobModel.id == job_id)
            .values(status="pending", attained=30.0, queued_at=NOW - 5, preemptions=1)
        )
    with db.reader() as session:
        [again] = builder.build(session, NOW).pending
    assert (again.attained, again.queued_at) == (30.0, NOW - 5)


def test_running_jobs_carry_team_user_and_attempt(db: Database) -> None:
    job_id = submit(db, priority=3, max_runtime_seconds=HOUR)
    run(db, job_id, started=NOW - 100)
    with db.session() as session:
        job = session.get(JobModel, job_id)
        job.attained, job.checkpoint_at = 50.0, NOW - 20
    builder = SnapshotBuilder()
    with db.reader() as session:
        [held] = builder.build(session, NOW).allocations
    assert (held.job_id, held.team, held.user, held.priority) == (job_id, "ml", "ann", 3)
    assert (held.started_at, held.attained, held.checkpoint_at) == (NOW - 100, 50.0, NOW - 20)
    assert (held.max_runtime, held.preemptible, held.stopping) == (HOUR, True, False)
    with db.session() as session:
        session.execute(update(AttemptModel).values(stop_reason="preempted"))
    with db.reader() as session:
        assert builder.build(session, NOW).allocations[0].stopping


def test_quotas_come_from_the_teams(db: Database) -> None:
    with db.reader() as session:
        snapshot = SnapshotBuilder().build(session, NOW)
    by_team = {quota.team: quota for quota in snapshot.quotas}
    assert (by_team["ml"].guarantee, by_team["ml"].limit, by_team["ml"].weight) == (
        {"A100": 2},
        4.0,
        2.0,
    )
    assert (by_team["default"].guarantee, by_team["default"].limit) == ({}, None)


def test_usage_decays_with_the_half_life(db: Database) -> None:
    run(db, submit(db), started=NOW - 2 * HOUR, ended=NOW - HOUR)  # one GPU-hour, an hour ago
    run(db, submit(db), started=NOW - HOUR)  # still running: one GPU-hour so far
    tracker = UsageTracker(half_life=HOUR)
    with db.reader() as session:
        usage = tracker.current(session, NOW)
    scale = HOUR / math.log(2)
    expected = scale * (0.5 - 0.25) + scale * (1 - 0.5)
    assert usage["ann"] == pytest.approx(expected)
    assert "admin" not in usage


def test_the_decay_formula() -> None:
    assert decayed_gpu_seconds(2, 0, 10, 10, 1e12) == pytest.approx(20)  # no decay to speak of
    assert decayed_gpu_seconds(1, 0, HOUR, HOUR, HOUR) == pytest.approx(HOUR / 2 / math.log(2))
    assert decayed_gpu_seconds(1, 0, 20, 10, HOUR) == decayed_gpu_seconds(1, 0, 10, 10, HOUR)


def test_a_weight_changed_while_a_build_reads_is_read_again_by_the_next(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control loop builds while an admin changes a weight: the build that read before
    the change (its transaction older than the commit) is not kept for the next ones."""
    builder = SnapshotBuilder()
    read = identity.user_weights  # the builder reads it through the identity package

    def read_then_change(session):  # noqa: ANN001, ANN202
        weights = read(session)  # what this build's transaction sees: before the change
        with db.session() as other:
            users.update_user(other, "ann", weight=3.0)
        builder.weights_changed()  # as the API announces it, after its commit
        return weights

    monkeypatch.setattr(identity, "user_weights", read_then_change)
    with db.reader() as session:
        assert dict(builder.build(session, NOW).weights) == {}
    monkeypatch.setattr(identity, "user_weights", read)
    with db.reader() as session:
        assert dict(builder.build(session, NOW).weights) == {"ann": 3.0}
