"""The pool on Ray, as the server runs it: the head (started, reused or attached to), the
bridge to it, and joining; the watches that turn Ray's nodes into gpupool's and restart an
ended head are pipelines (``gpupool.loops.nodes``).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gpupool
import gpupool.services.cluster._nodes as nodes
from gpupool.cluster.client import CallFailed, ClusterClient, ClusterUnavailable
from gpupool.cluster.executor import RayExecutor, api_address
from gpupool.cluster.process import RayProcess, start_node
from gpupool.cluster.rayenv import (
    LOOPBACK,
    ensure_token,
    node_resource,
    quiet_home,
    ray_environment,
    split_address,
)
from gpupool.domain.isolation import IsolationStatus
from gpupool.domain.views import ClusterView, HealthView, JoinView
from gpupool.errors import Conflict, NotAPool, NotFound, Unauthenticated
from gpupool.services.cluster._ports import Describes, Joins, Pool
from gpupool.services.core import ClusterSide, Principal
from gpupool.settings import Settings

log = logging.getLogger(__name__)

HEAD_RECORD = "head.json"
RAY_ADDRESS_RECORD = "ray_current_cluster"  # in Ray's temp dir: the head it started last
JOIN_TOKEN_FILE = "join-token"
HEAD_START_TRIES = 4  # at the server's start: a busy machine's head may miss Ray's deadlines


@dataclass
class ClusterState:
    """What the server knows of its Ray cluster now (health, the cluster page, the CLI)."""

    address: str
    reachable: bool
    problem: str | None
    unreachable_since: float | None
    nodes_up: list[str] = field(default_factory=list)


class NodesSeen(Protocol):
    """What the node watch (``gpupool.loops.nodes.Nodes``) knows of the nodes, as the
    cluster reads it: the nodes up, and a removed node forgotten."""

    up: dict[str, float]

    def forget(self, name: str) -> None: ...


class Background(Protocol):
    """A watch in a thread of its own, started and stopped with the cluster."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Cluster:
    """Owned by the Platform in Ray mode: the head (when this server runs it), the bridge,
    the executor that runs attempts through the agents; the node watch and the head watch
    (``gpupool.loops.nodes``) are given to it by the composition root, and run with it."""

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
        self.watch: NodesSeen | None = None  # the node watch (gpupool.loops.nodes)
        self.watches: list[Background] = []  # the node and head watches, set by the root

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
        for watch in self.watches:
            watch.start()

    def stop(self) -> None:
        """Stop the watches, then the head this server started (GCS, raylet, this machine's
        agent: every process of its session), so that a stopped server leaves no Ray behind;
        the joined nodes stop their work once the head has been gone ``node_lost_seconds``.
        A head this server found running (a server killed before it started it: it keeps
        the work it runs) and a cluster given by ``ray_address`` are left to run."""
        for watch in reversed(self.watches):
            watch.stop()
        if self.head is not None and self.owns_head:
            log.info("stopping the Ray head this server started (pid %s)", self.head.pid)
            self.head.stop()
            self.owns_head = False  # stopped once: a second stop finds nothing of it

    def close(self) -> None:
        """Stop the watches and the bridge."""
        self.stop()
        self.client.close()


def best_status(statuses: dict[str, IsolationStatus]) -> IsolationStatus | None:
    """The isolation the pool can give: a node that runs jobs first."""
    ranked = sorted(statuses.values(), key=lambda s: not s.runs_jobs)
    return ranked[0] if ranked else None


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


def join(ctx: Joins, address: str, token: str, name: str | None = None) -> JoinView:
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


def health(ctx: Pool) -> HealthView:
    """The server answers; in Ray mode, also whether its cluster does (public: no more)."""
    view = HealthView(version=gpupool.__version__)
    if ctx.cluster is None:
        return view
    reachable = ctx.cluster.state().reachable
    return view.model_copy(update={"cluster": "reachable" if reachable else "unreachable"})


def describe(ctx: Describes, who: Principal) -> ClusterView:
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


def _pool(ctx: Pool) -> ClusterSide:
    if ctx.cluster is None:
        raise NotAPool(
            "this server runs one machine, so no machine can join it: start it with "
            "'gpupool server --ray' to make a pool"
        )
    return ctx.cluster
