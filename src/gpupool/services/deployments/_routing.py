"""What the proxy needs to serve a deployment without a database read per request.

``RoutingTable``: each live deployment's name, team, the keys that may call it (their
hashes) and its ready replicas' endpoints, by id and by name (a name is unique in a team,
not in the pool: two teams may each serve one of a name), published by the rollouts pipeline
after each of its passes (and at once after a change a user made: a new key, a revoked one,
a stop).
``Traffic``: requests and latency per deployment and per replica, counted by the /serve
route. Both are kept in memory by ``_rollouts.Serving``: a restarted server starts its counts
from zero, and its table is published again by the first pass.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.deployments import REPLICA_TOKEN_HEADER, ReplicaState, TrafficView
from gpupool.services.jobs import Endpoint, endpoints_of
from gpupool.store.models import (
    DeploymentKeyModel,
    DeploymentModel,
    DeploymentReplicaModel,
    TeamModel,
)

LATENCY_SAMPLES = 2048  # the latest requests' latencies kept per deployment and replica


@dataclass(frozen=True)
class Route:
    """A live deployment as the proxy sees it: ``replicas`` are its READY ones, ``tokens``
    the secret each was started with (by replica id: sent to it with each request)."""

    deployment_id: int
    name: str
    team_id: int
    replicas: tuple[tuple[int, Endpoint], ...] = ()
    key_hashes: frozenset[str] = frozenset()
    tokens: Mapping[int, str] = field(default_factory=dict)
    team: str = ""

    def headers_for(self, replica_id: int) -> dict[str, str]:
        """What the proxy adds to a request to this replica (its token)."""
        token = self.tokens.get(replica_id)
        return {REPLICA_TOKEN_HEADER: token} if token else {}


class RoutingTable:
    """Deployments by id, replaced whole by each publication, looked up by name (the
    deployments of that name, one per team at most); round-robin picks."""

    def __init__(self) -> None:
        self._routes: dict[int, Route] = {}
        self._named: dict[str, tuple[Route, ...]] = {}
        self._turns = itertools.count()  # next() is atomic in CPython: no lock needed
        self._lock = threading.Lock()

    def publish(self, routes: dict[int, Route]) -> None:
        with self._lock:
            self._set(dict(routes))

    def publish_named(self, name: str, routes: dict[int, Route]) -> None:
        """Replace the routes of the deployments called ``name`` (one was made, stopped, or
        its keys changed), leaving the others as they are."""
        with self._lock:
            kept = {i: r for i, r in self._routes.items() if r.name != name}
            self._set(kept | {i: r for i, r in routes.items() if r.name == name})

    def named(self, name: str) -> tuple[Route, ...]:
        """The live deployments called ``name``, of whichever team (by id)."""
        return self._named.get(name, ())

    def _set(self, routes: dict[int, Route]) -> None:
        named: dict[str, list[Route]] = {}
        for deployment_id in sorted(routes):
            named.setdefault(routes[deployment_id].name, []).append(routes[deployment_id])
        # replaced together, each whole: a reader sees the old pair or the new one's parts
        self._routes, self._named = routes, {n: tuple(r) for n, r in named.items()}

    def pick(self, route: Route, tried: set[int]) -> tuple[int, Endpoint] | None:
        """The next ready replica in turn that was not tried yet for this request."""
        left = [replica for replica in route.replicas if replica[0] not in tried]
        if not left:
            return None
        return left[next(self._turns) % len(left)]


def load_routes(session: Session, name: str | None = None) -> dict[int, Route]:
    """The route of every live deployment (of those called ``name`` only, when given), by
    id, read now."""
    query = (
        select(DeploymentModel.id, DeploymentModel.name, DeploymentModel.team_id, TeamModel.name)
        .join(TeamModel, TeamModel.id == DeploymentModel.team_id)
        .where(DeploymentModel.stopped_at.is_(None))
    )
    if name is not None:
        query = query.where(DeploymentModel.name == name)
    deployments = session.execute(query).all()
    ids = [row[0] for row in deployments]
    ready, tokens = _ready(session, ids)
    keys = _keys(session, ids)
    return {
        did: Route(
            did,
            name,
            team_id,
            tuple(ready.get(did, ())),
            keys.get(did, frozenset()),
            {rid: tokens[rid] for rid, _ in ready.get(did, ()) if rid in tokens},
            team,
        )
        for did, name, team_id, team in deployments
    }


def _ready(
    session: Session, ids: list[int]
) -> tuple[dict[int, list[tuple[int, Endpoint]]], dict[int, str]]:
    """The ready replicas of each deployment that have an endpoint, by replica id, and
    each one's token."""
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
    endpoints = endpoints_of(session, [row.job_id for row in rows if row.job_id is not None])
    found: dict[int, list[tuple[int, Endpoint]]] = {}
    tokens: dict[int, str] = {}
    for deployment_id, replica_id, job_id, token in rows:
        if job_id in endpoints:
            found.setdefault(deployment_id, []).append((replica_id, endpoints[job_id]))
            if token:
                tokens[replica_id] = token
    return found, tokens


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
