"""Nodes: the Ray pool's nodes and head watched, beside the control thread.

``Nodes``, every second: Ray's view of the nodes (load: one call to the bridge) turned into
gpupool's. A node new or due for a refresh is discovered through its agent (slow work:
inventory, isolation, fabric, with no transaction open), then registered in one
transaction; a node Ray reports dead or gone is marked down (its attempts fenced and lost by
the executor); a node an admin removed is kept out. How a node is registered, marked down or
known removed is the cluster service's (``services.cluster``); the control loop is woken
when what the scheduler may use changed.

``Head``, every second: a head whose port stops answering is told to the bridge at once; an
ended head of this server is started again (same port, same secret), waiting longer after
each failed start, never while something else listens on its port.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpupool.cluster.client import AgentUnavailable, CallFailed, ClusterUnavailable
from gpupool.cluster.probe import HeadProbe, gcs_answers
from gpupool.cluster.process import RayProcess, RayStartError
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.isolation import IsolationStatus
from gpupool.loops.watch import Watch
from gpupool.scheduler.types import Clock
from gpupool.services import cluster as cluster_service
from gpupool.services.cluster import Cluster
from gpupool.store.db import Database

log = logging.getLogger(__name__)

WATCH_SECONDS = 1.0
INVENTORY_TIMEOUT_S = 120.0
HEAD_RESTART_FIRST_S = 2.0  # the wait before starting an ended head; doubled after a failure
HEAD_RESTART_LONGEST_S = 60.0
RECONNECT_TIMEOUT_S = 30.0


class Nodes(Watch):
    """Every second: Ray's view of the nodes, turned into gpupool's (register, down, up)."""

    def __init__(
        self,
        cluster: Cluster,
        db: Database,
        clock: Clock,
        on_change: Callable[[], None],
        interval: float = WATCH_SECONDS,
    ) -> None:
        self.cluster, self.db, self.clock = cluster, db, clock
        self.on_change, self.interval = on_change, interval
        self.up: dict[str, float] = {}  # node -> when its inventory was last read
        self.statuses: dict[str, IsolationStatus] = {}
        self.kept_out: set[str] = set()  # Ray node ids of removed nodes: said once
        super().__init__("gpupool-nodes", "the cluster's nodes", interval, look_first=True)

    def tick(self) -> None:
        if self.look():
            self.on_change()

    def look(self) -> bool:
        """One look; True when what the scheduler may use changed."""
        try:
            seen = self.cluster.client.nodes()
        except ClusterUnavailable:
            return False
        alive = self._admitted({n["name"]: n for n in seen if n["name"] and n["alive"]})
        changed = False
        for name in [name for name in self.up if name not in alive]:
            changed |= self._down(name, "Ray reports the node dead or gone")
        refresh = self.cluster.settings.discovery_interval_seconds
        for name, node in alive.items():
            due = name not in self.up or (
                refresh > 0 and time.monotonic() - self.up[name] > refresh
            )
            if due:
                changed |= self._discover(name, node.get("address"))
        return changed

    def forget(self, name: str) -> None:
        """``name`` was removed: it is no longer up (``look`` keeps it out from now on)."""
        self.up.pop(name, None)
        self.statuses.pop(name, None)

    def _admitted(self, alive: dict[str, dict]) -> dict[str, dict]:
        """``alive`` without the nodes an admin removed: a removed node whose joiner still
        runs (and joins again after a head restart) stays out until an admin lets it back.
        Said once per Ray node (a new one after each restart of the head)."""
        with self.db.reader() as session:
            removed = cluster_service.removed_names(session) & alive.keys()
        ray_ids = {alive[name]["ray_id"]: name for name in removed}
        for ray_id in sorted(ray_ids.keys() - self.kept_out):
            log.warning(
                "node %s runs, but an admin removed it: kept out of the pool until an admin "
                "lets it back (gpupool node undrain %s); Ray node %s",
                ray_ids[ray_id],
                ray_ids[ray_id],
                ray_id,
            )
        self.kept_out = set(ray_ids)
        return {name: node for name, node in alive.items() if name not in removed}

    def _discover(self, name: str, address: str | None) -> bool:
        client = self.cluster.client
        try:
            inventory = NodeInventory.model_validate(
                client.call(name, "inventory", timeout=INVENTORY_TIMEOUT_S)
            )
            status = client.call(name, "isolation_status")
            fabric = client.call(name, "fabric", address=address)
        except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
            log.warning("cannot discover node %s: %s", name, error)
            return False
        if status is not None:
            self.statuses[name] = IsolationStatus.model_validate(status)
            self.cluster.executor.isolation_status = cluster_service.best_status(self.statuses)
        joined = name not in self.up
        self.up[name] = time.monotonic()
        self.cluster.executor.node_up(name)
        with self.db.session() as session:
            cluster_service.register(
                session, inventory, self.clock.now(), address=address, fabric_group=fabric["name"]
            )
        if joined:
            log.info("node %s is up: %d GPUs, %d CPUs", name, len(inventory.gpus), inventory.cpus)
        return True

    def _down(self, name: str, why: str) -> bool:
        self.up.pop(name, None)
        self.statuses.pop(name, None)
        self.cluster.executor.node_down(name)
        with self.db.session() as session:
            cluster_service.mark_down(session, name, self.clock.now(), why)
        log.warning("node %s is down: %s", name, why)
        return True


class Head(Watch):
    """Every second, in a thread of its own (a head restart takes seconds, and no request
    waits for it): tells the client as soon as the head's port stops answering, so that the
    server says the cluster is unreachable at once rather than when Ray gives up; and, when
    this server runs the head and it has ended, starts it again (same port, same secret),
    waiting longer after each failed start. The bridge reconnects on the next call, and the
    node watch registers the nodes again as their joiners bring them back."""

    def __init__(
        self,
        cluster: Cluster,
        interval: float = WATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[str], bool] = gcs_answers,
        start: Callable[[threading.Event], RayProcess] | None = None,
    ) -> None:
        """``start``: how a new head is started (``start_head`` with the cluster's settings)."""
        self.cluster, self.interval, self.clock = cluster, interval, clock
        self.probe = HeadProbe(cluster.client.address, clock=clock, probe=probe)
        self.start_head = start or (
            lambda abort: cluster_service.start_head(cluster.settings, None, abort)
        )
        self.backoff = HEAD_RESTART_FIRST_S
        self.next_start: float | None = None  # when to start the ended head
        super().__init__("gpupool-head", "the Ray head", interval)

    def tick(self) -> None:
        self.look()

    def look(self) -> None:
        """One look at the head: a lost head is told to the client; an ended one of ours
        is started again when its wait is over."""
        head = self.cluster.head
        if head is not None and not head.alive():
            self.cluster.client.lost(f"its process (pid {head.pid}) has ended")
            self._restart(head)
        elif not self.probe.look():
            self.cluster.client.lost("its port does not accept connections")

    def _restart(self, head: RayProcess) -> None:
        now = self.clock()
        if self.next_start is None:
            self.next_start = now + self.backoff
            log.warning("the Ray head has ended; starting it again in %g s", self.backoff)
        if now < self.next_start:
            return
        head.stop()  # what is left of its session
        if self.probe.probe(self.cluster.address):  # not ours: never two heads on one port
            self._wait_longer(f"another process listens at {self.cluster.address}")
            return
        try:
            self.cluster.head = self.start_head(self._stopping)
        except RayStartError as error:
            self._wait_longer(str(error))
            return
        self.cluster.owns_head = True
        log.warning("the Ray head runs again (pid %s)", self.cluster.head.pid)
        self.next_start, self.backoff = None, HEAD_RESTART_FIRST_S
        self.cluster.client.connect(RECONNECT_TIMEOUT_S)

    def _wait_longer(self, why: str) -> None:
        self.backoff = min(self.backoff * 2, HEAD_RESTART_LONGEST_S)
        self.next_start = self.clock() + self.backoff
        log.warning("the Ray head did not start (%s); again in %g s", why, self.backoff)
