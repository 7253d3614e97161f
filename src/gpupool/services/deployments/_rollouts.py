"""Rollouts: how each deployment's desired state becomes running replicas.

Each pass of the rollouts pipeline (``gpupool.loops.rollouts``), in a thread of its own
beside the control loop:

1. reads every replica that is not stopped, with its job's state and endpoint (``probes``);
2. health-checks those whose job runs (``GET <health path>`` on the replica, through its
   endpoint), with no transaction open (the pipeline's own work);
3. in one short transaction (``roll``), moves each replica on (``replica_step``: ready
   after its first passing check; unhealthy after ``deploy_unhealthy_after`` failing ones,
   and then stopped and replaced; restarted with back-off when its job ended) and each
   deployment towards what it asks for (``deployment_step``: replicas added or retired; a
   rolling update one replica at a time: a new replica first, an old one retired only once
   it is ready — maxSurge 1, maxUnavailable 0; a new version whose replica never gets
   ready stops the roll and the old version keeps serving);
4. publishes the routing table the /serve route reads (ready replicas only), kept with the
   traffic counts by ``Serving``.

Replica jobs are submitted and cancelled through the jobs service, so the control loop does
the rest (it is woken when there is something for it).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

import gpupool.services.deployments._deployments as deployments
from gpupool.domain.deployments import (
    LIVE_STATES,
    DeploymentReason,
    ReplicaState,
)
from gpupool.domain.endpoints import Endpoint, Via
from gpupool.domain.jobs import JobStatus
from gpupool.errors import GpupoolError
from gpupool.executors.base import Executor
from gpupool.proxy import Kind, Routes
from gpupool.scheduler.types import NodeCapacity
from gpupool.services.deployments._replicas import stop_replica_job, submit_replica
from gpupool.services.deployments._routing import Traffic, load_routes
from gpupool.services.jobs import JobLimits, endpoints_of
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import (
    DeploymentModel,
    DeploymentReplicaModel,
    JobModel,
    ModelVersionModel,
)

FIRST_BACKOFF_S = 1.0
STEADY_S = 60.0  # a replica ready this long before its job ended restarts without delay


@dataclass(frozen=True)
class Probe:
    """One health check to make: replica, the job it checks, where."""

    replica_id: int
    job_id: int
    url: str
    token: str | None
    via: Via = None  # the way to a replica with a network of its own (Executor.endpoint)


class Serving:
    """The deployments as the /serve route and the deployments' services see them
    (``_ports.DeploymentSide``): their routes, published into the proxy's table
    (``routes``), and the traffic counts (``traffic``), kept in memory by the server.
    ``reconcile`` is the rollouts pipeline's wake, set once it is built: a change a user
    made is reconciled at once."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        routes: Routes,
        reconcile: Callable[[], None] = lambda: None,
    ) -> None:
        self.db, self.executor, self.reconcile = db, executor, reconcile
        self.routes = routes
        self.traffic = Traffic()

    def changed(self, name: str) -> None:
        """Publish the routes of the deployments called ``name`` now (a revoked key stops
        working before the call that revoked it returns), then reconcile at once."""
        with self.db.reader() as session:
            found = load_routes(session, self.executor, name)
        self.routes.publish_key(Kind.DEPLOYMENT, name, found)
        self.reconcile()

    def publish(self) -> None:
        """Publish every deployment's routes (after a pass of the rollouts pipeline)."""
        with self.db.reader() as session:
            self.routes.publish(Kind.DEPLOYMENT, load_routes(session, self.executor))


def probes(session: Session, executor: Executor) -> list[Probe]:
    """Step (1): what to check, each replica whose job runs and has an endpoint."""
    rows = session.execute(
        select(
            DeploymentReplicaModel.id,
            DeploymentReplicaModel.job_id,
            DeploymentReplicaModel.token,
            DeploymentModel,
        )
        .join(DeploymentModel, DeploymentModel.id == DeploymentReplicaModel.deployment_id)
        .where(
            DeploymentReplicaModel.state.in_([s.value for s in LIVE_STATES]),
            DeploymentReplicaModel.job_id.is_not(None),
        )
    ).all()
    endpoints = endpoints_of(session, executor, [row.job_id for row in rows])
    return [
        Probe(
            replica_id,
            job_id,
            _url(endpoints[job_id], deployment.template),
            token,
            endpoints[job_id].via,
        )
        for replica_id, job_id, token, deployment in rows
        if job_id in endpoints
    ]


def roll(
    session: Session,
    settings: Settings,
    recent_nodes: Callable[[], tuple[NodeCapacity, ...]],
    health: dict[tuple[int, int], bool],
    now: float,
) -> bool:
    """Step (3), in one transaction: each replica, then each deployment, moved on given the
    health checks made (``health``: (replica id, job id) -> passed); True when replica jobs
    were submitted or cancelled (the control loop has work). ``recent_nodes``: the control
    loop's view of the nodes' capacities (a replica's job is checked against them)."""
    return Pass(session, settings, recent_nodes, health, now).run()


class Pass:
    """The third step of a pass, in one transaction: replicas, then deployments, moved on."""

    def __init__(
        self,
        session: Session,
        settings: Settings,
        recent_nodes: Callable[[], tuple[NodeCapacity, ...]],
        health: dict[tuple[int, int], bool],
        now: float,
    ) -> None:
        self.session, self.settings, self.recent_nodes = session, settings, recent_nodes
        self.health, self.now = health, now
        self.submitted = False
        self._nodes = None

    def run(self) -> bool:
        for deployment in self._deployments():
            replicas = self._replicas(deployment.id)
            jobs = self._jobs([r.job_id for r in replicas if r.job_id is not None])
            for replica in replicas:
                self.replica_step(deployment, replica, jobs.get(replica.job_id))
            self.deployment_step(deployment, replicas)
        return self.submitted

    # -- replicas --------------------------------------------------------------------------------

    def replica_step(
        self, deployment: DeploymentModel, replica: DeploymentReplicaModel, job: JobModel | None
    ) -> None:
        if replica.state == ReplicaState.DRAINING:
            self._drain(deployment, replica, job)
        elif job is None:
            if replica.next_start_at is None or replica.next_start_at <= self.now:
                self.start(deployment, replica)
        elif JobStatus(job.status).is_final:
            self._ended(deployment, replica, job)
        elif job.status != JobStatus.RUNNING:
            replica.state = ReplicaState.PENDING.value
        else:
            self._running(deployment, replica, job)

    def _drain(
        self, deployment: DeploymentModel, replica: DeploymentReplicaModel, job: JobModel | None
    ) -> None:
        if job is None or JobStatus(job.status).is_final:
            replica.state = ReplicaState.STOPPED.value
        elif job.cancel_requested_at is None and (
            self.now - (replica.retired_at or self.now) >= self.settings.deploy_drain_seconds
        ):
            stop_replica_job(self.session, deployment, job.id, self.now)
            self.submitted = True

    def _ended(
        self, deployment: DeploymentModel, replica: DeploymentReplicaModel, job: JobModel
    ) -> None:
        steady = replica.state == ReplicaState.READY and replica.ready_at is not None
        steady = steady and self.now - replica.ready_at >= STEADY_S
        delay = 0.0 if steady else self._backoff(replica.restarts)
        said = f"{job.status}" + (
            f", exit code {job.exit_code}" if job.exit_code is not None else ""
        )
        why = f"its job {job.id} ended ({said}): {job.message or 'no message'}"
        replica.job_id, replica.state, replica.failures = None, ReplicaState.RESTARTING.value, 0
        replica.restarts += 1
        replica.next_start_at = self.now + delay
        replica.message = f"{why}; restart {replica.restarts} in {delay:g} s"
        text = f"replica {replica.id}: {replica.message} (see 'gpupool logs {job.id}')"
        self._say(deployment, DeploymentReason.REPLICA_EXITED, text)

    def _running(
        self, deployment: DeploymentModel, replica: DeploymentReplicaModel, job: JobModel
    ) -> None:
        ok = self.health.get((replica.id, job.id))
        state = ReplicaState(replica.state)
        if ok:
            replica.failures = 0
            if state != ReplicaState.READY:
                replica.state, replica.ready_at, replica.message = (
                    ReplicaState.READY.value,
                    self.now,
                    None,
                )
                text = f"replica {replica.id} (job {job.id} on {job.node}) is ready"
                deployments.record(
                    self.session, deployment.id, self.now, DeploymentReason.REPLICA_READY, text
                )
            return
        if state in (ReplicaState.PENDING, ReplicaState.RESTARTING):
            replica.state = ReplicaState.STARTING.value
        if ok is None or state == ReplicaState.UNHEALTHY:
            return
        if state in (ReplicaState.READY, ReplicaState.UNHEALTHY):
            replica.failures += 1
            if replica.failures >= self.settings.deploy_unhealthy_after:
                self._unhealthy(
                    deployment, replica, job, f"{replica.failures} health checks failed in a row"
                )
        elif (
            job.started_at is not None
            and self.now - job.started_at > self.settings.deploy_startup_seconds
        ):
            self._unhealthy(
                deployment,
                replica,
                job,
                f"not healthy {self.settings.deploy_startup_seconds:g} s after it started",
            )

    def _unhealthy(
        self, deployment: DeploymentModel, replica: DeploymentReplicaModel, job: JobModel, why: str
    ) -> None:
        replica.state = ReplicaState.UNHEALTHY.value
        replica.message = f"{why} ({_health(deployment)}): stopped, to be replaced"
        text = f"replica {replica.id} (job {job.id}): {replica.message}"
        self._say(deployment, DeploymentReason.REPLICA_UNHEALTHY, text)
        stop_replica_job(self.session, deployment, job.id, self.now)
        self.submitted = True

    def start(self, deployment: DeploymentModel, replica: DeploymentReplicaModel) -> None:
        """Submit the replica's (next) job; a refusal is said, and tried again later."""
        archive = self._archive(replica.model_version_id)
        spec = deployments.job_spec_of(deployment, archive, replica.id)
        limits = JobLimits.of(self.settings)
        try:  # a refusal comes from the checks, before anything is added to the session
            job = submit_replica(
                self.session, deployment, spec, self._capacities(), self.now, limits
            )
        except GpupoolError as error:
            replica.failures += 1  # refused submits in a row, until one is taken
            delay = self._backoff(replica.restarts + replica.failures)
            replica.next_start_at = self.now + delay
            replica.message = f"cannot start: {error.message} (tried again in {delay:g} s)"
            if (
                deployment.reason != DeploymentReason.SUBMIT_FAILED
                or deployment.message != replica.message
            ):
                self._say(deployment, DeploymentReason.SUBMIT_FAILED, replica.message)
            return
        replica.job_id, replica.next_start_at, replica.failures = job.id, None, 0
        replica.token = secrets.token_urlsafe(32)  # its job is told it at launch
        replica.state = ReplicaState.PENDING.value
        self.submitted = True

    # -- deployments -----------------------------------------------------------------------------

    def deployment_step(
        self, deployment: DeploymentModel, replicas: list[DeploymentReplicaModel]
    ) -> None:
        live = [r for r in replicas if r.state in LIVE_STATES]
        if deployment.stopped_at is not None:
            for replica in live:
                self.retire(deployment, replica, said=False)
            return
        current = [r for r in live if r.generation == deployment.generation]
        old = [r for r in live if r.generation != deployment.generation]
        if deployment.rolling_from is not None and self._roll(deployment, current, old):
            return
        self._scale(deployment, current)

    def _roll(
        self,
        deployment: DeploymentModel,
        current: list[DeploymentReplicaModel],
        old: list[DeploymentReplicaModel],
    ) -> bool:
        """One step of a rolling update; False once it is done (then it scales as usual)."""
        failed = [r for r in current if r.ready_at is None and _failed_once(r)]
        if failed:
            self._fail_roll(deployment, current, failed[0])
            return True
        if not old:
            version = self._version(deployment.model_version_id)
            text = f"now serving version {version} on every replica"
            self._say(deployment, DeploymentReason.UPDATE_DONE, text)
            deployment.rolling_from = deployment.rolling_from_version_id = None
            return False
        ready = [r for r in current if r.state == ReplicaState.READY]
        waiting = [r for r in current if r.state != ReplicaState.READY]
        if ready and len(ready) + len(old) > deployment.replicas:
            unready = [r for r in old if r.state != ReplicaState.READY]
            self.retire(deployment, (unready or old)[0])
        elif not waiting and len(ready) + len(old) <= deployment.replicas:
            self.add(deployment)
        return True

    def _fail_roll(
        self,
        deployment: DeploymentModel,
        current: list[DeploymentReplicaModel],
        failed: DeploymentReplicaModel,
    ) -> None:
        new, old = (
            self._version(deployment.model_version_id),
            self._version(deployment.rolling_from_version_id),
        )
        for replica in current:
            self.retire(deployment, replica, said=False)
        deployment.generation, deployment.model_version_id = (
            deployment.rolling_from,
            deployment.rolling_from_version_id,
        )
        deployment.rolling_from = deployment.rolling_from_version_id = None
        text = (
            f"update to version {new} stopped: its replica {failed.id} never became healthy "
            f"({failed.message}); version {old} keeps serving"
        )
        self._say(deployment, DeploymentReason.UPDATE_FAILED, text)

    def _scale(self, deployment: DeploymentModel, current: list[DeploymentReplicaModel]) -> None:
        missing = deployment.replicas - len(current)
        for _ in range(missing):
            self.add(deployment)
        if missing < 0:  # the unready first, then the newest
            extra = sorted(current, key=lambda r: (r.state == ReplicaState.READY, -r.id))
            for replica in extra[:-missing]:
                self.retire(deployment, replica)

    def add(self, deployment: DeploymentModel) -> None:
        replica = DeploymentReplicaModel(
            deployment_id=deployment.id,
            generation=deployment.generation,
            model_version_id=deployment.model_version_id,
            state=ReplicaState.PENDING.value,
            created_at=self.now,
            failures=0,
            restarts=0,
        )
        self.session.add(replica)
        self.session.flush()
        self.start(deployment, replica)

    def retire(
        self, deployment: DeploymentModel, replica: DeploymentReplicaModel, said: bool = True
    ) -> None:
        """Routed no more at once; its job is stopped after the drain time."""
        replica.state, replica.retired_at = ReplicaState.DRAINING.value, self.now
        if said:
            text = f"replica {replica.id} (job {replica.job_id}) retired"
            deployments.record(
                self.session, deployment.id, self.now, DeploymentReason.REPLICA_RETIRED, text
            )
        if replica.job_id is None:
            replica.state = ReplicaState.STOPPED.value

    # -- helpers ---------------------------------------------------------------------------------

    def _say(self, deployment: DeploymentModel, reason: DeploymentReason, text: str) -> None:
        deployment.reason, deployment.message = reason.value, text
        deployments.record(self.session, deployment.id, self.now, reason, text)

    def _backoff(self, restarts: int) -> float:
        return min(
            self.settings.deploy_max_backoff_seconds, FIRST_BACKOFF_S * 2 ** min(restarts, 10)
        )

    def _capacities(self) -> tuple[NodeCapacity, ...]:
        if self._nodes is None:
            self._nodes = self.recent_nodes()
        return self._nodes

    def _deployments(self) -> list[DeploymentModel]:
        """The live deployments, and the stopped ones with replicas still to stop."""
        unstopped = select(DeploymentReplicaModel.deployment_id).where(
            DeploymentReplicaModel.state != ReplicaState.STOPPED.value
        )
        query = select(DeploymentModel).where(
            DeploymentModel.stopped_at.is_(None) | DeploymentModel.id.in_(unstopped)
        )
        return list(self.session.scalars(query.order_by(DeploymentModel.id)))

    def _replicas(self, deployment_id: int) -> list[DeploymentReplicaModel]:
        query = select(DeploymentReplicaModel).where(
            DeploymentReplicaModel.deployment_id == deployment_id,
            DeploymentReplicaModel.state != ReplicaState.STOPPED.value,
        )
        return list(self.session.scalars(query.order_by(DeploymentReplicaModel.id)))

    def _jobs(self, ids: list[int]) -> dict[int, JobModel]:
        if not ids:
            return {}
        return {
            job.id: job
            for job in self.session.scalars(select(JobModel).where(JobModel.id.in_(ids)))
        }

    def _archive(self, version_id: int | None) -> str | None:
        if version_id is None:
            return None
        return self.session.scalar(
            select(ModelVersionModel.archive).where(ModelVersionModel.id == version_id)
        )

    def _version(self, version_id: int | None) -> int | None:
        return deployments.version_number(self.session, version_id)


def _failed_once(replica: DeploymentReplicaModel) -> bool:
    """Its job ended, or its health checks timed out, before it was ever ready."""
    return replica.restarts > 0 or replica.state == ReplicaState.UNHEALTHY


def _health(deployment: DeploymentModel) -> str:
    return f"GET {deployment.template.get('health_path', '/health')}"


def _url(endpoint: Endpoint, template: dict) -> str:
    return endpoint.url + str(template.get("health_path") or "/health")
