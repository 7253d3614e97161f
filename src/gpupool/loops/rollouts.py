"""Rollouts: each deployment's desired state turned into running, healthy replicas.

A pass every ``deploy_health_interval_seconds`` (the first at start), or at once when a user
changed a deployment, in a thread of its own beside the control thread. Load: the replicas
whose job runs and where they answer (``services.deployments.probes``). Slow work: their
health checks (``GET <health path>``, 16 at a time), with no transaction open. Apply: in one
transaction, replicas and deployments moved on (``roll``: the rollout rules are the
deployments' service's); the control loop woken when replica jobs were submitted or
cancelled; then the deployments' routes published into the proxy's table (``Serving.publish``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from gpupool.domain.deployments import REPLICA_TOKEN_HEADER
from gpupool.executors.base import Executor
from gpupool.loops.watch import Watch
from gpupool.proxy import PLAIN_HTTP, client_via
from gpupool.scheduler.types import Clock, NodeCapacity
from gpupool.services.deployments import Probe, Serving, probes, roll
from gpupool.settings import Settings
from gpupool.store.db import Database

PROBES_AT_ONCE = 16
PROBE_TIMEOUT_S = 2.0


class Rollouts(Watch):
    """Started and stopped with the platform; publishes through ``serving`` (into the
    proxy's table, which the /serve route reads) after each pass, and is woken by it when
    a deployment changed."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        settings: Settings,
        clock: Clock,
        serving: Serving,
        wake: Callable[[], None],
        recent_nodes: Callable[[], tuple[NodeCapacity, ...]],
    ) -> None:
        """``wake`` tells the control loop to schedule now (replicas were submitted or
        cancelled); ``recent_nodes`` is its view of the nodes' capacities."""
        self.db, self.executor, self.settings = db, executor, settings
        self.clock, self.serving = clock, serving
        self.wake_loop, self.recent_nodes = wake, recent_nodes
        self._http: httpx.Client | None = None
        self._pool: ThreadPoolExecutor | None = None
        interval = settings.deploy_health_interval_seconds
        super().__init__("gpupool-deployments", "the deployments", interval, look_first=True)
        serving.reconcile = self.wake

    def start(self) -> None:
        timeout = min(PROBE_TIMEOUT_S, self.settings.deploy_health_interval_seconds)
        self._http = httpx.Client(
            timeout=timeout, trust_env=False, follow_redirects=False, verify=PLAIN_HTTP
        )
        self._pool = ThreadPoolExecutor(PROBES_AT_ONCE, thread_name_prefix="gpupool-health")
        super().start()

    def stop(self) -> None:
        super().stop()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._http is not None:
            self._http.close()

    def tick(self) -> None:
        self.run_once()

    def run_once(self) -> None:
        with self.db.reader() as session:
            checks = probes(session, self.executor)
        health = self._check(checks)
        now = self.clock.now()
        with self.db.session() as session:
            submitted = roll(session, self.settings, self.recent_nodes, health, now)
        if submitted:
            self.wake_loop()
        self.serving.publish()

    def _check(self, checks: list[Probe]) -> dict[tuple[int, int], bool]:
        """(replica id, job id) -> whether its health check passed (2xx)."""
        if not checks or self._pool is None:
            return {}
        answers = self._pool.map(self._passes, checks)
        return {(p.replica_id, p.job_id): ok for p, ok in zip(checks, answers, strict=True)}

    def _passes(self, probe: Probe) -> bool:
        headers = {REPLICA_TOKEN_HEADER: probe.token} if probe.token else None
        try:
            if probe.via is None:
                return 200 <= self._http.get(probe.url, headers=headers).status_code < 300
            timeout = min(PROBE_TIMEOUT_S, self.settings.deploy_health_interval_seconds)
            with client_via(probe.via, timeout) as client:
                return 200 <= client.get(probe.url, headers=headers).status_code < 300
        except (httpx.HTTPError, OSError):
            return False
