"""Builds first, in the control pass: a GPU job placed on a node that has not built its
environment waits for a CPU-only build job there (which launches in its spot, without its
GPUs), and starts once the build ends; jobs of the same environment share one build; CPU
jobs, jobs on a node that holds it, and a job that waited once start as placed."""

from __future__ import annotations

from sqlalchemy import update

from gpupool.domain.jobs import JobKind, JobSpec
from gpupool.executors.task import Observed, PollResult
from gpupool.loops import Control
from gpupool.services import cluster, jobs
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import EnvironmentModel, JobModel, NodeModel
from tests.support.clock import ManualClock
from tests.support.environments import add_environment
from tests.unit.loops.conftest import (
    ADMIN,
    ScriptedExecutor,
    control_of,
    job_row,
    reasons,
    submit,
)

ENV = "sha256:" + "cd" * 32
REF = f"torch@{ENV}"


def with_environment(db: Database, clock: ManualClock, gpus: int = 1) -> int:
    """A job of the admin's team whose recorded environment is ``REF`` (a locked one)."""
    with db.session() as session:
        if session.query(EnvironmentModel).count() == 0:
            add_environment(session, 1, "torch", ENV, 1)
    if gpus:
        job_id = submit(db, clock, gpus=gpus)
    else:
        with db.session() as session:
            spec = JobSpec(command=["true"])
            job_id = jobs.submit(session, ADMIN, spec, [], clock.now()).id
    with db.session() as session:
        spec = session.get(JobModel, job_id).spec | {"environment": REF}
        session.execute(update(JobModel).where(JobModel.id == job_id).values(spec=spec))
    return job_id


def launched(executor: ScriptedExecutor) -> list[tuple[int, str, list[str], float]]:
    return [(t.job_id, t.node, t.gpu_uuids, t.cpus) for t in executor.tasks]


def builds(db: Database) -> list[JobModel]:
    with db.reader() as session:
        found = session.query(JobModel).filter(JobModel.kind == JobKind.ENV_BUILD.value).all()
        for row in found:
            session.expunge(row)
        return found


def test_a_gpu_job_waits_for_a_cpu_build_on_its_node_then_starts_there(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    train = with_environment(db, clock, gpus=2)
    control.driver.run_once()
    [build] = builds(db)
    assert launched(executor) == [(build.id, "node-a", [], 1.0)]  # no GPU; its job's CPU
    assert (build.user_id, build.team_id, build.spec["environment"]) == (1, 1, REF)
    assert build.name == "build environment torch on node-a"
    row = job_row(db, train)
    assert (row.status, row.waiting, row.reason) == ("pending", True, "EnvBuilding")
    assert row.message == f"waits for job {build.id} (build environment torch on node-a) to end"

    second = with_environment(db, clock)  # the same environment, while it builds: no 2nd
    control.driver.run_once()
    assert len(builds(db)) == 1 and job_row(db, second).waiting
    cpu_only = with_environment(db, clock, gpus=0)  # no GPU held idle: it builds itself
    control.driver.run_once()
    assert launched(executor)[-1][0] == cpu_only

    executor.observe(build.id, 1, PollResult(Observed.EXITED, exit_code=0, started_at=1.0))
    control.driver.run_once(force_schedule=False)
    started = {job_id: gpus for job_id, _, gpus, _ in launched(executor)}
    assert len(started[train]) == 2 and len(started[second]) == 1
    assert reasons(db, train)[:4] == ["Submitted", "EnvBuilding", "Queued", "Placed"]


def test_a_node_that_holds_the_environment_starts_the_job_at_once(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    with db.session() as session:
        cluster.record_holdings(session, {"node-a": {f"env:{ENV}": 1 << 30}}, clock.now())
    train = with_environment(db, clock)
    control.driver.run_once()
    assert [job_id for job_id, *_ in launched(executor)] == [train]
    assert builds(db) == []


def test_a_failed_build_lets_its_job_start_and_build_it_itself(
    db: Database, clock: ManualClock, control: Control, executor: ScriptedExecutor
) -> None:
    train = with_environment(db, clock)
    control.driver.run_once()
    [build] = builds(db)
    executor.observe(build.id, 1, PollResult(Observed.EXITED, exit_code=125, started_at=1.0))
    control.driver.run_once(force_schedule=False)
    # it waited once: placed again where nothing is built, it starts (its start builds)
    assert [job_id for job_id, *_ in launched(executor)] == [build.id, train]
    assert len(builds(db)) == 1


def test_builds_first_can_be_turned_off(
    db: Database, clock: ManualClock, settings: Settings, executor: ScriptedExecutor
) -> None:
    control = control_of(db, executor, settings.model_copy(update={"env_build_jobs": False}), clock)
    train = with_environment(db, clock)
    control.driver.run_once()
    assert [job_id for job_id, *_ in launched(executor)] == [train]
    with db.reader() as session:
        assert session.query(NodeModel).one().name == "node-a"
