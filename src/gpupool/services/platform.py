"""Opening the platform: database, first admin, local node, executor, control loop."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpupool.discovery import discover_node
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.isolation import IsolationStatus
from gpupool.executors.base import Executor
from gpupool.executors.isolation import Isolation
from gpupool.executors.local import LocalExecutor
from gpupool.scheduler import schedule
from gpupool.scheduler.types import Clock, Schedule
from gpupool.services import cluster as cluster_service
from gpupool.services import identity
from gpupool.services.control import ControlLoop
from gpupool.services.core import NodeRemoved, SystemClock
from gpupool.services.deployments import DeploymentLoop
from gpupool.services.identity import SignInThrottle
from gpupool.services.metrics import Ingester
from gpupool.services.notebooks import IdleWatch
from gpupool.services.scheduling import StorageWatch
from gpupool.settings import Settings
from gpupool.store.db import Database, prepare

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


@dataclass
class Platform:
    """Everything a request or a loop may use; built once when the server starts."""

    settings: Settings
    db: Database
    executor: Executor
    loop: ControlLoop
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
        """Start the background work: the control loop and the node watcher."""
        self.loop.start()
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
        self.loop.stop()
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


def open_platform(
    settings: Settings,
    executor: Executor | None = None,
    clock: Clock | None = None,
    decide: Schedule = schedule,
) -> Platform:
    """Prepare the data directory and database, register this node; the loop is not started.

    ``decide`` replaces the scheduler (tests inject decisions such as preemptions)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    clock = clock or SystemClock()
    db = Database(settings.database)
    prepare(db)
    _keep_private(settings)
    with db.session() as session:
        first = identity.bootstrap(session, clock.now())
    if settings.ray_enabled and executor is None:
        return _open_pool(settings, db, clock, decide, first)
    isolation = Isolation(settings, api=(settings.port, str(settings.api_socket)))
    executor = executor or LocalExecutor(
        settings.jobs_dir,
        base_env=_base_env(),
        isolation=isolation,
        code_limits=settings.code_limits(),
        model_limits=settings.model_limits(),
    )
    loop = ControlLoop(db, executor, settings, clock, decide)
    watcher = NodeWatcher(
        settings, db, clock, on_change=loop.wake, on_inventory=isolation.devices.update
    )
    watcher.refresh()
    found = watcher.inventory
    log.info("node %s: %d GPUs, %d CPUs", found.name, len(found.gpus), found.cpus)
    return Platform(settings, db, executor, loop, clock, watcher, first)


def _open_pool(
    settings: Settings,
    db: Database,
    clock: Clock,
    decide: Schedule,
    first: identity.Bootstrap | None,
) -> Platform:
    """Ray mode: the head (or the cluster given), its nodes watched instead of this machine."""
    from gpupool.services.cluster import Cluster, NodeWatch

    cluster = Cluster.open(settings)
    loop = ControlLoop(db, cluster.executor, settings, clock, decide)
    cluster.watch = NodeWatch(cluster, db, clock, on_change=loop.wake)
    if cluster.client.connect():
        cluster.watch.look()  # this machine's node, before the first request comes
    else:
        log.warning("%s", cluster.client.problem)
    platform = Platform(settings, db, cluster.executor, loop, clock, None, first, cluster=cluster)
    platform.on_node_removed = cluster.removed
    return platform


def _keep_private(settings: Settings) -> None:
    """The data directory and the SQLite files are the server's alone (0700, 0600): they
    hold every token hash and web session. SQLite gives its -wal and -shm files the mode
    of the database file."""
    settings.data_dir.chmod(0o700)
    if settings.is_sqlite:
        for path in settings.data_dir.glob("gpupool.db*"):
            path.chmod(0o600)


def _base_env() -> dict[str, str]:
    """What every workload inherits from the server: a sane PATH, HOME, locale."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "TMPDIR", "VIRTUAL_ENV")
    return {name: os.environ[name] for name in keep if name in os.environ}
