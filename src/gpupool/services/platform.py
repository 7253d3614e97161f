"""Opening the platform: database, first admin, local node, executor, control loop."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.discovery import discover_node
from gpupool.domain.inventory import NodeInventory
from gpupool.executors.base import Executor
from gpupool.executors.local import LocalExecutor
from gpupool.scheduler import schedule
from gpupool.scheduler.types import Clock, Schedule
from gpupool.services import auth, nodes
from gpupool.services.clock import SystemClock
from gpupool.services.control import ControlLoop
from gpupool.settings import Settings
from gpupool.store.db import Database, prepare

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
    ) -> None:
        self.settings, self.db, self.clock = settings, db, clock
        self.on_change, self.discover = on_change, discover
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._capacity: object = None
        self.inventory: NodeInventory | None = None

    def refresh(self) -> bool:
        """Discover and record the node; True when what it can run has changed."""
        inventory = self.inventory = self.discover(self.settings)
        with self.db.session() as session:
            nodes.register(session, inventory, self.clock.now())
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
    watcher: NodeWatcher
    first_start: auth.Bootstrap | None = None
    tokens: auth.TokenCache = field(default_factory=auth.TokenCache)

    def start(self) -> None:
        """Start the background work: the control loop and the node watcher."""
        self.loop.start()
        self.watcher.start()

    def stop(self) -> None:
        """Stop the background work; running jobs go on (a restart re-adopts them)."""
        self.watcher.stop()
        self.loop.stop()
        self.executor.close()

    def close(self) -> None:
        self.stop()
        self.db.dispose()


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
    with db.session() as session:
        first = auth.bootstrap(session, clock.now())
    executor = executor or LocalExecutor(settings.jobs_dir, base_env=_base_env())
    loop = ControlLoop(db, executor, settings, clock, decide)
    watcher = NodeWatcher(settings, db, clock, on_change=loop.wake)
    watcher.refresh()
    found = watcher.inventory
    log.info("node %s: %d GPUs, %d CPUs", found.name, len(found.gpus), found.cpus)
    return Platform(settings, db, executor, loop, clock, watcher, first)


def _base_env() -> dict[str, str]:
    """What every workload inherits from the server: a sane PATH, HOME, locale."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "TMPDIR", "VIRTUAL_ENV")
    return {name: os.environ[name] for name in keep if name in os.environ}
