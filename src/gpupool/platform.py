"""The composition root: opening the platform — data directory, database, first admin,
this node (or the Ray pool), the executor, the control pipelines and the pipelines beside
them (metric ingest, rollouts, notebooks' routes and idleness, storage; on a pool the node
and head watches), the proxy's routing table — as one ``Platform``.

It builds everything and nothing but the server's entry points (``gpupool.server``) and
tests import it: services never see the loops, only the ``LoopSide`` face the platform
holds.
"""

from __future__ import annotations

import logging
import os

from gpupool.executors.base import Executor
from gpupool.executors.environments import NodeEnvironments
from gpupool.executors.isolation import Isolation
from gpupool.executors.local import LocalExecutor
from gpupool.loops import Control
from gpupool.loops.discovery import NodeWatcher
from gpupool.loops.experiments import Experiments
from gpupool.loops.holdings import Holdings
from gpupool.loops.ingest import Ingest
from gpupool.loops.nodes import Head, Nodes
from gpupool.loops.notebook_idle import NotebookIdle
from gpupool.loops.notebook_routes import NotebookRoutes as NotebookRoutesWatch
from gpupool.loops.rollouts import Rollouts
from gpupool.loops.storage import Storage
from gpupool.loops.tuning import Tuning
from gpupool.proxy import Kind, Routes
from gpupool.scheduler import schedule
from gpupool.scheduler.state import Schedule
from gpupool.scheduler.types import Clock
from gpupool.services import deployments, identity, notebooks
from gpupool.services.core import SystemClock
from gpupool.services.deployments import Serving
from gpupool.services.notebooks import NotebookRoutes
from gpupool.services.platform import Background, Platform, Submitting
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
        dataset_cache=settings.dataset_cache_dir,
        dataset_cache_max_bytes=settings.dataset_cache_max_bytes,
        environments=NodeEnvironments(settings),
        image_cache=settings.images_dir / "roots",
    )
    control = Control.open(db, executor, settings, clock, decide)
    watcher = NodeWatcher(
        settings, db, clock, on_change=control.face.wake, on_inventory=isolation.devices.update
    )
    watcher.refresh()
    found = watcher.inventory
    if isinstance(executor, LocalExecutor) and executor.node_name is None:
        executor.node_name = found.name  # it answers for this machine's node (its holdings)
    log.info("node %s: %d GPUs, %d CPUs", found.name, len(found.gpus), found.cpus)
    routes = _routes()
    serving = Serving(db, executor, routes)
    notebooks = NotebookRoutes(db, executor, routes)
    trials = Experiments(Submitting(settings, db, clock, control.face))
    tuner = Tuning(Submitting(settings, db, clock, control.face))
    return Platform(
        settings,
        db,
        executor,
        control.face,
        control,
        clock,
        watcher,
        routes,
        serving,
        notebooks,
        first,
        watches=(
            *_watches(settings, db, executor, clock, control, serving, notebooks, trials),
            tuner,
        ),
        experiments=trials,
        tunings=tuner,
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
    routes = _routes()
    serving = Serving(db, cluster.executor, routes)
    notebooks = NotebookRoutes(db, cluster.executor, routes)
    trials = Experiments(Submitting(settings, db, clock, control.face))
    tuner = Tuning(Submitting(settings, db, clock, control.face))
    platform = Platform(
        settings,
        db,
        cluster.executor,
        control.face,
        control,
        clock,
        None,
        routes,
        serving,
        notebooks,
        first,
        cluster=cluster,
        watches=(
            *_watches(settings, db, cluster.executor, clock, control, serving, notebooks, trials),
            tuner,
        ),
        experiments=trials,
        tunings=tuner,
    )
    platform.on_node_removed = cluster.removed
    return platform


def _routes() -> Routes:
    """The proxy's one routing table, with each kind's rule from the capability that
    publishes it (who may open a notebook, who may call a deployment)."""
    return Routes(
        admit={Kind.NOTEBOOK: notebooks.admit, Kind.DEPLOYMENT: deployments.admit},
        lookup={Kind.DEPLOYMENT: deployments.published_under},
    )


def _watches(
    settings: Settings,
    db: Database,
    executor: Executor,
    clock: Clock,
    control: Control,
    serving: Serving,
    notebook_routes: NotebookRoutes,
    trials: Experiments,
) -> tuple[Background, ...]:
    """The pipelines beside the control thread, each with only the ports it uses, in the
    order they start (and stop the other way round). The notebooks' routes are published
    again whenever the control thread saw attempts start or end; the experiments are
    looked at again then, and when metric points were kept."""
    loop = control.face
    published = NotebookRoutesWatch(notebook_routes)
    control.driver.on_changed.append(published.wake)
    held = Holdings(db, clock, executor.holdings, settings.holdings_scan_seconds)
    control.driver.on_changed.append(held.wake)
    control.driver.on_changed.append(trials.jobs_changed)
    return (
        Ingest(db, executor, clock, on_kept=trials.jobs_changed, hurried=trials.awaits_points),
        Rollouts(db, executor, settings, clock, serving, loop.wake, loop.recent_nodes),
        published,
        NotebookIdle(
            db,
            executor,
            clock,
            loop.wake,
            settings.notebook_idle_seconds,
            stopped=notebook_routes.publish,
        ),
        Storage(db, settings, clock, loop.stops_recorded, executor.node_files),
        held,
        trials,
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
