"""The composition root: opening the platform — data directory, database, first admin,
this node (or the Ray pool), the executor, the control pipelines and the pipelines beside
them (metric ingest, rollouts, notebooks' idleness, storage; on a pool the node and head
watches) — as one ``Platform``.

It builds everything and nothing but the server's entry points (``gpupool.server``) and
tests import it: services never see the loops, only the ``LoopSide`` face the platform
holds.
"""

from __future__ import annotations

import logging
import os

from gpupool.executors.base import Executor
from gpupool.executors.isolation import Isolation
from gpupool.executors.local import LocalExecutor
from gpupool.loops import Control, LoopFace
from gpupool.loops.discovery import NodeWatcher
from gpupool.loops.ingest import Ingest
from gpupool.loops.nodes import Head, Nodes
from gpupool.loops.notebook_idle import NotebookIdle
from gpupool.loops.rollouts import Rollouts
from gpupool.loops.storage import Storage
from gpupool.scheduler import schedule
from gpupool.scheduler.types import Clock, Schedule
from gpupool.services import identity
from gpupool.services.core import SystemClock
from gpupool.services.deployments import Serving
from gpupool.services.platform import Background, Platform
from gpupool.settings import Settings
from gpupool.store.db import Database, prepare

log = logging.getLogger(__name__)


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
    control = Control.open(db, executor, settings, clock, decide)
    watcher = NodeWatcher(
        settings, db, clock, on_change=control.face.wake, on_inventory=isolation.devices.update
    )
    watcher.refresh()
    found = watcher.inventory
    log.info("node %s: %d GPUs, %d CPUs", found.name, len(found.gpus), found.cpus)
    serving = Serving(db)
    return Platform(
        settings,
        db,
        executor,
        control.face,
        control,
        clock,
        watcher,
        serving,
        first,
        watches=_watches(settings, db, executor, clock, control.face, serving),
    )


def _open_pool(
    settings: Settings,
    db: Database,
    clock: Clock,
    decide: Schedule,
    first: identity.Bootstrap | None,
) -> Platform:
    """Ray mode: the head (or the cluster given), its nodes watched instead of this machine."""
    from gpupool.services.cluster import Cluster

    cluster = Cluster.open(settings)
    control = Control.open(db, cluster.executor, settings, clock, decide)
    nodes = Nodes(cluster, db, clock, on_change=control.face.wake)
    cluster.watch, cluster.watches = nodes, [nodes, Head(cluster)]
    if cluster.client.connect():
        nodes.look()  # this machine's node, before the first request comes
    else:
        log.warning("%s", cluster.client.problem)
    serving = Serving(db)
    platform = Platform(
        settings,
        db,
        cluster.executor,
        control.face,
        control,
        clock,
        None,
        serving,
        first,
        cluster=cluster,
        watches=_watches(settings, db, cluster.executor, clock, control.face, serving),
    )
    platform.on_node_removed = cluster.removed
    return platform


def _watches(
    settings: Settings,
    db: Database,
    executor: Executor,
    clock: Clock,
    loop: LoopFace,
    serving: Serving,
) -> tuple[Background, ...]:
    """The pipelines beside the control thread, each with only the ports it uses, in the
    order they start (and stop the other way round)."""
    return (
        Ingest(db, executor, clock),
        Rollouts(db, settings, clock, serving, loop.wake, loop.recent_nodes),
        NotebookIdle(db, clock, loop.wake, settings.notebook_idle_seconds),
        Storage(db, settings, clock, loop.stops_recorded, executor.node_files),
    )


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
