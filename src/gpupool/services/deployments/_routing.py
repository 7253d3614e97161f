"""What the proxy needs to serve a deployment without a database read per request, and
what /serve counted.

``load_routes``: each live deployment's route (``proxy.Route`` of kind deployment): its
name, team, the keys that may call it (their hashes) and its ready replicas, each with its
endpoint and its token; ``_rollouts.Serving`` publishes them into the proxy's table after
each pass of the rollouts pipeline (and at once after a change a user made: a new key, a
revoked one, a stop). ``Traffic``: requests and latency per deployment and per replica,
counted by the /serve route, in memory: a restarted server starts its counts from zero.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.deployments import REPLICA_TOKEN_HEADER, ReplicaState, TrafficView
from gpupool.executors.base import Executor
from gpupool.proxy import Kind, Route, Upstream
from gpupool.services.jobs import endpoints_of
from gpupool.store.models import (
    DeploymentKeyModel,
    DeploymentModel,
    DeploymentReplicaModel,
    TeamModel,
)

LATENCY_SAMPLES = 2048  # the latest requests' latencies kept per deployment and replica


def load_routes(session: Session, executor: Executor, name: str | None = None) -> list[Route]:
    """The route of every live deployment (of those called ``name`` only, when given), read
    now."""
    query = (
        select(DeploymentModel.id, DeploymentModel.name, DeploymentModel.team_id, TeamModel.name)
        .join(TeamModel, TeamModel.id == DeploymentModel.team_id)
        .where(DeploymentModel.stopped_at.is_(None))
    )
    if name is not None:
        query = query.where(DeploymentModel.name == name)
    deployments = session.execute(query).all()
    ids = [row[0] for row in deployments]
    ready = _ready(session, executor, ids)
    keys = _keys(session, ids)
    return [
        Route(
            Kind.DEPLOYMENT,
            name,
            did,
            team_id,
            team,
            key_hashes=keys.get(did, frozenset()),
            upstreams=tuple(ready.get(did, ())),
        )
        for did, name, team_id, team in deployments
    ]


def _ready(session: Session, executor: Executor, ids: list[int]) -> dict[int, list[Upstream]]:
    """The ready replicas of each deployment that have an endpoint, with their tokens."""
    rows = session.execute(
        select(
            DeploymentReplicaModel.deployment_id,
            DeploymentReplicaModel.id,
            DeploymentReplicaModel.job_id,
            DeploymentReplicaModel.token,
        )
        .where(
            DeploymentReplicaModel.deployment_id.in_(ids),
            DeploymentReplicaModel.state == ReplicaState.READY.value,
        )
        .order_by(DeploymentReplicaModel.id)
    ).all()
    jobs = [row.job_id for row in rows if row.job_id is not None]
    endpoints = endpoints_of(session, executor, jobs)
    found: dict[int, list[Upstream]] = {}
    for deployment_id, replica_id, job_id, token in rows:
        if job_id in endpoints:
            # a replica started before replicas had tokens gets none
            headers = {REPLICA_TOKEN_HEADER: token} if token else {}
            found.setdefault(deployment_id, []).append(
                Upstream(replica_id, endpoints[job_id], headers)
            )
    return found


def _keys(session: Session, ids: list[int]) -> dict[int, frozenset[str]]:
    rows = session.execute(
        select(DeploymentKeyModel.deployment_id, DeploymentKeyModel.key_hash).where(
            DeploymentKeyModel.deployment_id.in_(ids), DeploymentKeyModel.revoked_at.is_(None)
        )
    ).all()
    found: dict[int, set[str]] = {}
    for deployment_id, key_hash in rows:
        found.setdefault(deployment_id, set()).add(key_hash)
    return {deployment_id: frozenset(hashes) for deployment_id, hashes in found.items()}


@dataclass
class _Counts:
    requests: int = 0
    errors: int = 0
    total_seconds: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))

    def add(self, seconds: float, failed: bool) -> None:
        self.requests += 1
        self.errors += int(failed)
        self.total_seconds += seconds
        self.recent.append(seconds)

    def view(self) -> TrafficView:
        if not self.requests:
            return TrafficView()
        ordered = sorted(self.recent)
        return TrafficView(
            requests=self.requests,
            errors=self.errors,
            mean_ms=round(1000 * self.total_seconds / self.requests, 3),
            p50_ms=round(1000 * _quantile(ordered, 0.5), 3),
            p99_ms=round(1000 * _quantile(ordered, 0.99), 3),
        )


class Traffic:
    """Request counts and latencies (the latest ``LATENCY_SAMPLES`` for the quantiles) per
    deployment id and per replica id."""

    def __init__(self) -> None:
        self._deployments: dict[int, _Counts] = {}
        self._replicas: dict[int, _Counts] = {}
        self._lock = threading.Lock()

    def record(
        self, deployment_id: int, replica_id: int | None, seconds: float, failed: bool
    ) -> None:
        with self._lock:
            self._deployments.setdefault(deployment_id, _Counts()).add(seconds, failed)
            if replica_id is not None:
                self._replicas.setdefault(replica_id, _Counts()).add(seconds, failed)

    def of_deployment(self, deployment_id: int) -> TrafficView:
        with self._lock:
            counts = self._deployments.get(deployment_id)
            return counts.view() if counts else TrafficView()

    def of_replica(self, replica_id: int) -> TrafficView:
        with self._lock:
            counts = self._replicas.get(replica_id)
            return counts.view() if counts else TrafficView()


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
