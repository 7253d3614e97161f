"""The pool on Ray, as the server runs it: the head (started, reused or attached to), the
bridge to it, the watch that turns Ray's nodes into gpupool's, and joining.

A machine joins with ``gpupool node join SERVER --token T``: it shows the join token to
``join``, gets the head's address and the pool's Ray secret back, and starts a Ray node
carrying its name. The watch sees the node come up, has its agent discover it, and
registers it: from then on it is schedulable. A node Ray reports dead, or that vanishes, is
marked down; its attempts are fenced and then lost by the executor (``RayExecutor``).
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpupool
import gpupool.services.cluster._nodes as nodes
from gpupool.cluster.client import AgentUnavailable, CallFailed, ClusterClient, ClusterUnavailable
from gpupool.cluster.executor import RayExecutor, api_address
from gpupool.cluster.probe import HeadProbe, gcs_answers
from gpupool.cluster.process import RayProcess, RayStartError, start_node
from gpupool.cluster.rayenv import (
    LOOPBACK,
    ensure_token,
    node_resource,
    quiet_home,
    ray_environment,
    split_address,
)
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.isolation import IsolationStatus
from gpupool.domain.views import ClusterView, HealthView, JoinView
from gpupool.errors import Conflict, NotAPool, NotFound, Unauthenticated
from gpupool.scheduler.types import Clock
from gpupool.services.core import Context, Principal, Watch
from gpupool.settings import Settings
from gpupool.store.db import Database

log = logging.getLogger(__name__)

WATCH_SECONDS = 1.0
HEAD_RECORD = "head.json"
RAY_ADDRESS_RECORD = "ray_current_cluster"  # in Ray's temp dir: the head it started last
JOIN_TOKEN_FILE = "join-token"
INVENTORY_TIMEOUT_S = 120.0
HEAD_RESTART_FIRST_S = 2.0  # the wait before starting an ended head; doubled after a failure
HEAD_RESTART_LONGEST_S = 60.0
HEAD_START_TRIES = 4  # at the server's start: a busy machine's head may miss Ray's deadlines
RECONNECT_TIMEOUT_S = 30.0


@dataclass
class ClusterState:
    """What the server knows of its Ray cluster now (health, the cluster page, the CLI)."""

    address: str
    reachable: bool
    problem: str | None
    unreachable_since: float | None
    nodes_up: list[str] = field(default_factory=list)


class Cluster:
    """Owned by the Platform in Ray mode: the head (when this server runs it), the bridge,
    the executor that runs attempts through the agents, the node watch and the head watch."""

    def __init__(
        self,
        settings: Settings,
        head: RayProcess | None,
        client: ClusterClient,
        owns_head: bool = False,
    ) -> None:
        """``owns_head``: this server started ``head`` (not found it running), so it stops
        it when it stops."""
        self.settings, self.head, self.client = settings, head, client
        self.owns_head = owns_head
        self.executor = RayExecutor(
            client,
            settings.jobs_dir,
            node_lost_seconds=settings.node_lost_seconds,
            api_address=api_address(settings.host, settings.port, client.address),
        )
        self.watch: NodeWatch | None = None
        self.head_watch = HeadWatch(self)

    @classmethod
    def open(cls, settings: Settings) -> Cluster:
        """Start (or find again) this server's head, or attach to ``ray_address``."""
        token = token_path(settings)
        settings.cluster_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        head, owns_head = None, False
        address = settings.ray_address
        if address is None:
            head = found_head(settings, token)
            if head is None:
                head, owns_head = start_head(settings, token, tries=HEAD_START_TRIES), True
            address = f"{settings.host}:{settings.ray_port}"
        host, _ = split_address(address)
        env = ray_environment(
            token, host, settings.ray_health_period_ms, settings.ray_health_failures
        )
        client = ClusterClient(address, env, settings.cluster_dir / "bridge.log")
        return cls(settings, head, client, owns_head)

    @property
    def address(self) -> str:
        return self.client.address

    def state(self) -> ClusterState:
        up = sorted(self.watch.up) if self.watch is not None else []
        return ClusterState(
            address=self.address,
            reachable=self.client.reachable,
            problem=self.client.problem,
            unreachable_since=self.client.unreachable_since,
            nodes_up=up,
        )

    def join_answer(self, token: str) -> dict[str, Any]:
        """What a joining machine needs, for the right join token (Unauthenticated else)."""
        if not hmac.compare_digest(token.encode(), join_token(self.settings).encode()):
            raise Unauthenticated("the join token is not this pool's: ask an admin for it")
        return {
            "ray_address": self.address,
            "ray_token": token_path(self.settings).read_text().strip(),
            "health_period_ms": self.settings.ray_health_period_ms,
            "health_failures": self.settings.ray_health_failures,
            "object_store_bytes": self.settings.ray_object_store_bytes,
            "node_lost_seconds": self.settings.node_lost_seconds,
        }

    def removed(self, name: str) -> None:
        """An admin removed ``name``: end its agent, and let the watch register it again only
        when it joins again (a new Ray node); its Ray node stays until its joiner stops."""
        if self.watch is not None:
            self.watch.forget(name)
        try:
            self.client.forget_agent(name)
        except (ClusterUnavailable, CallFailed) as error:
            log.warning("cannot end the agent of removed node %s: %s", name, error)

    def start(self) -> None:
        """Start watching the nodes and the head."""
        if self.watch is not None:
            self.watch.start()
        self.head_watch.start()

    def stop(self) -> None:
        """Stop the watches, then the head this server started (GCS, raylet, this machine's
        agent: every process of its session), so that a stopped server leaves no Ray behind;
        the joined nodes stop their work once the head has been gone ``node_lost_seconds``.
        A head this server found running (a server killed before it started it: it keeps
        the work it runs) and a cluster given by ``ray_address`` are left to run."""
        self.head_watch.stop()
        if self.watch is not None:
            self.watch.stop()
        if self.head is not None and self.owns_head:
            log.info("stopping the Ray head this server started (pid %s)", self.head.pid)
            self.head.stop()
            self.owns_head = False  # stopped once: a second stop finds nothing of it

    def close(self) -> None:
        """Stop the watches and the bridge."""
        self.stop()
        self.client.close()


class NodeWatch(Watch):
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
            removed = nodes.removed_names(session) & alive.keys()
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
            self.cluster.executor.isolation_status = best_status(self.statuses)
        joined = name not in self.up
        self.up[name] = time.monotonic()
        self.cluster.executor.node_up(name)
        with self.db.session() as session:
            nodes.register(
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
            nodes.mark_down(session, name, self.clock.now(), why)
        log.warning("node %s is down: %s", name, why)
        return True


def best_status(statuses: dict[str, IsolationStatus]) -> IsolationStatus | None:
    """The isolation the pool can give: a node that runs jobs first."""
    ranked = sorted(statuses.values(), key=lambda s: not s.runs_jobs)
    return ranked[0] if ranked else None


class HeadWatch(Watch):
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
        self.start_head = start or (lambda abort: start_head(cluster.settings, None, abort))
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


# -- the head -----------------------------------------------------------------------------------


def found_head(settings: Settings, token: Path) -> RayProcess | None:
    """The Ray head recorded in ``cluster_dir`` when it still runs: a server restarted after
    it was killed keeps its cluster, and the work running on it."""
    env = head_environment(settings, token)
    found = RayProcess.found(settings.cluster_dir / HEAD_RECORD, env, head_log(settings))
    if found is not None:
        log.info("the Ray head of this server runs already (pid %s): using it", found.pid)
    return found


def start_head(
    settings: Settings,
    token: Path | None = None,
    abort: threading.Event | None = None,
    tries: int = 1,
) -> RayProcess:
    """A new Ray head for this server, recorded in ``cluster_dir`` (RayStartError when it
    does not start in ``tries``, or ``abort`` is set meanwhile)."""
    env = head_environment(settings, token or token_path(settings))
    record = settings.cluster_dir / HEAD_RECORD
    # Ray refuses to start a head at the address it recorded last while any raylet of this
    # machine names that address (a node of this pool on the same machine, still trying to
    # reach the head that ended): the record is ours alone (our temp dir), and stale.
    (ray_temp_dir(settings) / RAY_ADDRESS_RECORD).unlink(missing_ok=True)
    head = RayProcess(head_args(settings), env, head_log(settings))
    if tries > 1:
        head = start_node(head, tries, log.warning)
    else:
        head.start(abort=abort)
    head.save(record)
    return head


def head_log(settings: Settings) -> Path:
    return settings.cluster_dir / "head.log"


def head_args(settings: Settings) -> list[str]:
    args = [
        "--head",
        f"--node-ip-address={settings.host}",
        f"--port={settings.ray_port}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--object-store-memory={settings.ray_object_store_bytes}",
        "--num-gpus=0",  # gpupool hands out GPUs itself; Ray must not set CUDA_VISIBLE_DEVICES
        f"--temp-dir={ray_temp_dir(settings)}",
    ]
    if settings.ray_head_node:
        args.append(f'--resources={{"{node_resource(node_name(settings))}": 1}}')
    return args


def head_environment(settings: Settings, token: Path) -> dict[str, str]:
    """The head's variables: Ray's, a quiet HOME, and, for the agent of this machine's node,
    the server's own GPUPOOL_* settings with the node's name and its own data directory."""
    env = ray_environment(
        token, settings.host, settings.ray_health_period_ms, settings.ray_health_failures
    )
    env["HOME"] = str(quiet_home(settings.cluster_dir / "home"))
    env.update(node_environment(settings, node_name(settings), settings.cluster_dir / "node"))
    return env


def node_environment(settings: Settings, name: str, data_dir: Path) -> dict[str, str]:
    """GPUPOOL_* variables for a node's agent: ``settings``' node-side ones, its name and data
    directory (never the server's database)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("GPUPOOL_")}
    for key in ("DATABASE_URL", "JOIN_TOKEN", "RAY_TOKEN_FILE", "PUBLIC_URL"):
        env.pop(f"GPUPOOL_{key}", None)
    fields = {
        "declared_gpus": settings.declared_gpus,
        "declared_links": settings.declared_links,
        "declared_cpus": settings.declared_cpus,
        "declared_memory": settings.declared_memory,
        "isolation": settings.isolation,
    }
    env.update({f"GPUPOOL_{k.upper()}": str(v) for k, v in fields.items() if v is not None})
    env["GPUPOOL_NODE_NAME"], env["GPUPOOL_DATA_DIR"] = name, str(data_dir)
    return env


def node_name(settings: Settings) -> str:
    return settings.node_name or socket.gethostname() or "localhost"


def ray_temp_dir(settings: Settings) -> Path:
    """Ray's session files: a short path (its sockets' paths must fit in 107 bytes)."""
    import hashlib

    digest = hashlib.sha256(str(settings.data_dir.resolve()).encode()).hexdigest()[:10]
    return Path("/tmp") / f"gpupool-ray-{digest}"


def token_path(settings: Settings) -> Path:
    if settings.ray_token_file is not None:
        return settings.ray_token_file
    return ensure_token(settings.cluster_dir / "ray-token")


def join_token(settings: Settings) -> str:
    """The join token: the setting, else one made at the first start and kept (0600)."""
    if settings.join_token:
        return settings.join_token
    path = settings.cluster_dir / JOIN_TOKEN_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("gpj_" + secrets.token_urlsafe(24))
    return path.read_text().strip()


def is_loopback(address: str) -> bool:
    return split_address(address)[0] == LOOPBACK


# -- what the API calls -------------------------------------------------------------------------


def join(ctx: Context, address: str, token: str, name: str | None = None) -> JoinView:
    """The head's address and the pool's Ray secret, for the right join token; a wrong one is
    counted against ``address`` as an unknown API token is (429 past the limit), and the right
    one is never refused, whatever its address did. With ``name``:
    whether that node is up and schedulable yet (the joiner waits for it)."""
    cluster = _pool(ctx)
    with ctx.throttle.guard(address):
        answer = cluster.join_answer(token)
    if name is not None:
        with ctx.db.reader() as session:
            if name in nodes.removed_names(session):
                raise Conflict(
                    f"node '{name}' was removed from the pool: it stays out until an admin "
                    f"lets it back (gpupool node undrain {name})"
                )
            try:
                node = nodes.get_node(session, name)
            except NotFound:
                node = None
            up = node is not None and node.state == "up" and node.removed_at is None
            answer.update(node_up=up, node_schedulable=bool(up and node.schedulable))
    return JoinView(**answer)


def health(ctx: Context) -> HealthView:
    """The server answers; in Ray mode, also whether its cluster does (public: no more)."""
    view = HealthView(version=gpupool.__version__)
    if ctx.cluster is None:
        return view
    reachable = ctx.cluster.state().reachable
    return view.model_copy(update={"cluster": "reachable" if reachable else "unreachable"})


def describe(ctx: Context, who: Principal) -> ClusterView:
    """The engine and its health; admins also get the head's address and the join command."""
    cluster = ctx.cluster
    if cluster is None:
        return ClusterView(mode="local", reachable=True)
    state = cluster.state()
    view = ClusterView(
        mode="ray",
        reachable=state.reachable,
        problem=state.problem,
        unreachable_since=state.unreachable_since,
        nodes_up=state.nodes_up,
    )
    if not who.is_admin:
        return view
    url = ctx.settings.public_url or f"http://{ctx.settings.host}:{ctx.settings.port}"
    command = f"gpupool node join {url} --token {join_token(ctx.settings)}"
    return view.model_copy(update={"address": state.address, "join_command": command})


def _pool(ctx: Context) -> Cluster:
    if ctx.cluster is None:
        raise NotAPool(
            "this server runs one machine, so no machine can join it: start it with "
            "'gpupool server --ray' to make a pool"
        )
    return ctx.cluster
