"""Opening the platform: database, first admin, local node, executor, control loop."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from gpupool.discovery import discover_node
from gpupool.executors.base import Executor
from gpupool.executors.local import LocalExecutor
from gpupool.scheduler.types import Clock
from gpupool.services import auth, nodes
from gpupool.services.clock import SystemClock
from gpupool.services.control import ControlLoop
from gpupool.settings import Settings
from gpupool.store.db import Database, prepare

log = logging.getLogger(__name__)


@dataclass
class Platform:
    """Everything a request or a loop may use; built once when the server starts."""

    settings: Settings
    db: Database
    executor: Executor
    loop: ControlLoop
    clock: Clock
    first_start: auth.Bootstrap | None = None
    tokens: auth.TokenCache = field(default_factory=auth.TokenCache)

    def close(self) -> None:
        self.loop.stop()
        self.executor.close()
        self.db.dispose()


def open_platform(
    settings: Settings, executor: Executor | None = None, clock: Clock | None = None
) -> Platform:
    """Prepare the data directory and database, register this node; the loop is not started."""
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    clock = clock or SystemClock()
    db = Database(settings.database)
    prepare(db)
    with db.session() as session:
        first = auth.bootstrap(session, clock.now())
    inventory = discover_node(settings)
    with db.session() as session:
        nodes.register(session, inventory, clock.now())
    log.info("node %s: %d GPUs, %d CPUs", inventory.name, len(inventory.gpus), inventory.cpus)
    executor = executor or LocalExecutor(settings.jobs_dir, base_env=_base_env())
    loop = ControlLoop(db, executor, settings, clock)
    return Platform(settings, db, executor, loop, clock, first)


def _base_env() -> dict[str, str]:
    """What every workload inherits from the server: a sane PATH, HOME, locale."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "TMPDIR", "VIRTUAL_ENV")
    return {name: os.environ[name] for name in keep if name in os.environ}
