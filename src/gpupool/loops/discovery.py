"""Discovery: this machine's node discovered again every ``discovery_interval_seconds``.

Slow work: the discovery (``nvidia-smi`` and the like, which may hang), in a thread of its
own so that it never stalls scheduling. Apply: the node registered in one transaction
(``services.cluster.register``): utilisation stays current, and a GPU that appears or goes
away reaches the scheduler without a restart (the control loop is woken when what the node
can run changed). Not used on a Ray pool, whose nodes are watched by ``loops.nodes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpupool.discovery import discover_node
from gpupool.domain.inventory import NodeInventory
from gpupool.loops.watch import Watch
from gpupool.scheduler.types import Clock
from gpupool.services import cluster as cluster_service
from gpupool.settings import Settings
from gpupool.store.db import Database

log = logging.getLogger(__name__)


class NodeWatcher(Watch):
    """Discovers this node again every ``interval`` seconds, in a thread of its own (none
    when the interval is 0); ``refresh`` does one look (the server's start calls it)."""

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
        self._capacity: object = None
        self.inventory: NodeInventory | None = None
        interval = settings.discovery_interval_seconds
        super().__init__("gpupool-discovery", "this node", interval)

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
        if self.interval > 0:
            super().start()

    def tick(self) -> None:
        try:
            if self.refresh():
                log.info("node %s changed; rescheduling", self.inventory.name)
                self.on_change()
        except Exception:  # a failed discovery must not end the watch
            log.exception("node discovery failed")
