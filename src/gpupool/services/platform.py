"""The running server as requests and background work see it: ``Platform``.

The composition root (``gpupool.platform.open_platform``) builds it: the database, the
executor, the control pipelines (``loop``: their face, ``services.core.LoopSide``;
``control``: their thread), this node's discovery (``watcher``) or the Ray pool, and the
pipelines that run beside the control thread (``watches``: metric ingest, rollouts,
notebooks' idleness, storage; built in ``gpupool.loops`` with only the ports each uses).
Services see none of them but through the ports here. The proxy's routing table
(``routes``) is published into by the deployments (``deployments``: from the rollouts
pipeline) and the notebooks (``notebooks``: from the notebooks' routes pipeline, and at
once when one is stopped); the /serve and /notebooks routers read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gpupool.domain.inventory import NodeInventory
from gpupool.domain.isolation import IsolationStatus
from gpupool.executors.base import Executor
from gpupool.proxy import Routes
from gpupool.scheduler.types import Clock
from gpupool.services import cluster as cluster_service
from gpupool.services import identity
from gpupool.services.core import LoopSide, NodeRemoved
from gpupool.services.deployments import Serving
from gpupool.services.experiments import Wakes
from gpupool.services.identity import SignInThrottle
from gpupool.services.notebooks import NotebookRoutes
from gpupool.settings import Settings
from gpupool.store.db import Database

if TYPE_CHECKING:
    from gpupool.services.cluster import Cluster


class OwnNode(Protocol):
    """This machine's node as the server sees it (``gpupool.loops.discovery.NodeWatcher``):
    what its last discovery found, and its thread."""

    inventory: NodeInventory | None

    def start(self) -> None: ...

    def stop(self) -> None: ...


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
    watcher: OwnNode | None  # this node's discovery (None on a Ray pool)
    routes: Routes  # the proxy's one routing table
    deployments: Serving  # the deployments' routes and traffic counts
    notebooks: NotebookRoutes  # the notebooks' routes
    first_start: identity.Bootstrap | None = None
    cluster: Cluster | None = None  # the Ray pool, when the server runs one (--ray)
    # metric ingest, rollouts, notebooks' idleness, storage: each in a thread of its own
    watches: tuple[Background, ...] = ()
    tokens: identity.TokenCache = field(default_factory=identity.TokenCache)
    throttle: SignInThrottle = field(init=False)  # failed sign-ins, counted since start
    # told a removed node's name after the commit; the cluster side sets it to stop the node
    on_node_removed: NodeRemoved = field(default=cluster_service.nothing_to_stop)
    # the experiments pipeline, woken when one is made, resumed or stopped
    experiments: Wakes = field(default_factory=lambda: _Unwatched())
    # the tuning watch, woken when an admin asks for a tuning of the scheduler's settings
    tunings: Wakes = field(default_factory=lambda: _Unwatched())

    def __post_init__(self) -> None:
        self.throttle = SignInThrottle.from_settings(self.settings)

    def start(self) -> None:
        """Start the background work: the control pipelines, the watches, the node watcher."""
        self.control.start()
        for watch in self.watches:
            watch.start()
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
        for watch in reversed(self.watches):
            watch.stop()
        self.control.stop()
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


class _Unwatched:
    """No experiments pipeline (a platform built without one, in tests): nothing to wake."""

    def wake(self) -> None:
        pass


@dataclass(frozen=True)
class Submitting:
    """What a pipeline that submits jobs needs (``services.core.Submits``): the settings,
    the database, the clock and the control loop's face."""

    settings: Settings
    db: Database
    clock: Clock
    loop: LoopSide
