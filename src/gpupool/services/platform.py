"""The running server as requests and background work see it: ``Platform``.

The composition root (``gpupool.platform.open_platform``) builds it: the database, the
executor, the control pipelines (``loop``: their face, ``services.core.LoopSide``;
``control``: their thread), this node's watcher or the Ray pool. The watches of services
(metrics, deployments, notebooks' idleness, storage) are made here from its ports.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gpupool.discovery import discover_node
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.isolation import IsolationStatus
from gpupool.executors.base import Executor
from gpupool.scheduler.types import Clock
from gpupool.services import cluster as cluster_service
from gpupool.services import identity
from gpupool.services.core import LoopSide, NodeRemoved
from gpupool.services.deployments import DeploymentLoop
from gpupool.services.identity import SignInThrottle
from gpupool.services.metrics import Ingester
from gpupool.services.notebooks import IdleWatch
from gpupool.services.scheduling import StorageWatch
from gpupool.settings import Settings
from gpupool.store.db import Database

if TYPE_CHECKING:
    from gpupool.services.cluster import Cluster

log = logging.getLogger(__name__)


class NodeWatcher:
    """Discovers this node again every ``interval`` seconds, in a thread of its own (a slow
    ``nvidia-smi`` must not stall scheduling): utilisation stays current, and a GPU that
    appears or goes away reaches the scheduler without a restart."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        clock: Clock,
        on_change: Callable[[], None],
        discover: Callable[[Settings], NodeInventory] = discover_node,
        on_inventory: Callable[[NodeInventory], None] | None = None,
    ) -> None:
        self.settings, self.db, self.clock = settings, db, clock
        self.on_change, self.discover = on_change, discover
        self.on_inventory = on_inventory
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._capacity: object = None
        self.inventory: NodeInventory | None = None

    def refresh(self) -> bool:
        """Discover and record the node; True when what it can run has changed."""
        inventory = self.inventory = self.discover(self.settings)
        if self.on_inventory is not None:
            self.on_inventory(inventory)
        with self.db.session() as session:
            cluster_service.register(session, inventory, self.clock.now())
        capacity = (inventory.cpus, inventory.memory_bytes, inventory.schedulable_gpus())
        changed, self._capacity = capacity != self._capacity, capacity
        return changed

    def start(self) -> None:
        interval = self.settings.discovery_interval_seconds
        if interval > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpupool-discovery", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopping.wait(self.settings.discovery_interval_seconds):
            try:
                if self.refresh():
                    log.info("node %s changed; rescheduling", self.inventory.name)
                    self.on_change()
            except Exception:  # a failed discovery must not end the watch
                log.exception("node discovery failed")


class Background(Protocol):
    """Work in threads of its own, started with the server and stopped with it."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class Platform:
    """Everything a request or a loop may use; built once when the server starts."""

    settings: Settings
    db: Database
    executor: Executor
    loop: LoopSide  # the control pipelines as services see them
    control: Background  # their thread (gpupool.loops.Control)
    clock: Clock
    watcher: NodeWatcher | None
    first_start: identity.Bootstrap | None = None
    cluster: Cluster | None = None  # the Ray pool, when the server runs one (--ray)
    tokens: identity.TokenCache = field(default_factory=identity.TokenCache)
    throttle: SignInThrottle = field(init=False)  # failed sign-ins, counted since start
    ingester: Ingester = field(init=False)  # jobs' metrics, into the database, off the loop
    deployments: DeploymentLoop = field(init=False)  # replicas, health checks, /serve routes
    idle_watch: IdleWatch = field(init=False)  # stops notebooks that hold GPUs and idle
    storage: StorageWatch = field(init=False)  # teams' storage, the database's disk reserve
    # told a removed node's name after the commit; the cluster side sets it to stop the node
    on_node_removed: NodeRemoved = field(default=cluster_service.nothing_to_stop)

    def __post_init__(self) -> None:
        self.throttle = SignInThrottle.from_settings(self.settings)
        self.ingester = Ingester(self.db, self.executor, self.clock)
        self.deployments = DeploymentLoop(
            self.db, self.settings, self.clock, self.loop.wake, self.loop.recent_nodes
        )
        self.idle_watch = IdleWatch(
            self.db, self.clock, self.loop.wake, self.settings.notebook_idle_seconds
        )
        self.storage = StorageWatch(
            self.db, self.settings, self.clock, self.loop.stops_recorded, self.executor.node_files
        )

    def start(self) -> None:
        """Start the background work: the control pipelines, the watches, the node watcher."""
        self.control.start()
        self.ingester.start()
        self.deployments.start()
        self.idle_watch.start()
        self.storage.start()
        if self.watcher is not None:
            self.watcher.start()
        if self.cluster is not None:
            self.cluster.start()

    def stop(self) -> None:
        """Stop the background work; running jobs go on (a restart re-adopts them)."""
        if self.watcher is not None:
            self.watcher.stop()
        if self.cluster is not None:
            self.cluster.stop()
        self.deployments.stop()
        self.idle_watch.stop()
        self.storage.stop()
        self.control.stop()
        self.ingester.stop()
        self.executor.close()

    def close(self) -> None:
        self.stop()
        self.db.dispose()

    def isolation(self) -> IsolationStatus | None:
        """How this node keeps jobs apart, and whether it can run them (None: no sandbox)."""
        return self.executor.isolation()

    @property
    def own_node(self) -> str | None:
        """The server's own node, as its watcher last discovered it."""
        if self.watcher is None:  # a Ray pool: this machine's node is the head's
            from gpupool.services.cluster import node_name

            return node_name(self.settings) if self.settings.ray_head_node else None
        found = self.watcher.inventory
        return found.name if found is not None else None
