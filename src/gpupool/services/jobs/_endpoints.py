"""Where a job that listens (``JobSpec.listen``) serves: the proxy's upstream.

Its executor kept, in the attempt's executor state (so a restarted server finds it again),
the address and port it listens on and, for a workload with a network of its own, the
runner's socket through which alone it is reached (``runner.bridge``), or, on a pool's node,
its node agent's relay to that socket (``cluster.relay``: its address and the attempt's
key). A job that is not running, or that does not listen, has no endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
from httpcore._backends.sync import SyncStream
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.cluster.relay import RelayTarget
from gpupool.cluster.relay import connect as relay_connect
from gpupool.domain.jobs import JobStatus
from gpupool.runner import bridge
from gpupool.services.cluster import node_addresses
from gpupool.store.models import AttemptModel, JobModel

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """An address and TCP port a running workload listens on; ``socket``: the runner's
    socket to connect to instead, when the address is inside the workload's own network
    namespace (the address then only names the workload's own view, for its Host header);
    ``relay``: for such a workload on a pool's node, its node agent's relay to that socket."""

    host: str
    port: int
    socket: str | None = None
    relay: RelayTarget | None = None

    @property
    def via(self) -> Via:
        """The one way to the workload other than its address: see ``Via``."""
        return self.relay or self.socket

    def client(self, timeout: httpx.Timeout | float) -> httpx.Client:
        """An HTTP client of this endpoint alone (health checks, the notebook watch): through
        the runner's socket where there is one. Close it after use."""
        return client_via(self.via, timeout)

    @property
    def url(self) -> str:
        """``http://host:port`` (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


Via = str | RelayTarget | None
"""How the platform reaches a workload with a network of its own: its runner's socket (a
path), its node agent's relay to that socket; None: at its address."""


def client_via(via: Via, timeout: httpx.Timeout | float) -> httpx.Client:
    """An HTTP client through ``via`` (see ``Via``). Close it after use."""
    options: dict[str, Any] = {"timeout": timeout, "trust_env": False, "follow_redirects": False}
    if isinstance(via, RelayTarget):
        return httpx.Client(transport=_RelayTransport(via), **options)
    if via is not None:
        return httpx.Client(transport=_SocketTransport(via), **options)
    return httpx.Client(**options)


def endpoint_of(session: Session, job_id: int) -> Endpoint | None:
    """Where the running attempt of ``job_id`` listens; None when it is not running or has
    no port. No access check: the caller has decided that its principal may reach it."""
    return endpoints_of(session, [job_id]).get(job_id)


def endpoints_of(session: Session, job_ids: list[int]) -> dict[int, Endpoint]:
    """``endpoint_of`` for many jobs at once: only those that have one are in the answer."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(AttemptModel.job_id, AttemptModel.node, AttemptModel.executor_state)
        .join(JobModel, JobModel.id == AttemptModel.job_id)
        .where(
            AttemptModel.job_id.in_(job_ids),
            AttemptModel.number == JobModel.attempts,
            AttemptModel.status == "running",
            JobModel.status == JobStatus.RUNNING.value,
        )
    ).all()
    listening = {job_id: (node, listens_at(state)) for job_id, node, state in rows}
    listening = {job_id: found for job_id, found in listening.items() if found[1] is not None}
    addresses = node_addresses(session, sorted({node for node, _ in listening.values()}))
    found = {}
    for job_id, (node, (host, port, via)) in listening.items():
        host = host or addresses.get(node) or LOOPBACK
        if isinstance(via, RelayTarget):
            found[job_id] = Endpoint(host, port, relay=via)
        else:
            found[job_id] = Endpoint(host, port, via)
    return found


def listens_at(
    executor_state: Mapping[str, Any] | None,
) -> tuple[str | None, int, Via] | None:
    """The (host, port, way through: ``Via``) an executor recorded for an attempt (a job
    over several nodes: its first task's), or None. The host is None when the executor did
    not say (then the node's address is used); the way through None for a workload on the
    node's network."""
    if not executor_state:
        return None
    state = executor_state.get("state") or {}
    if "gang" in state and state["gang"]:
        state = state["gang"][0]
    port = state.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        return None
    host = state.get("host")
    via = state.get("socket")
    via = via if isinstance(via, str) and via.startswith("/") else None
    if "relay" in state:  # on a pool's node: its runner's socket is reached by its agent
        via = RelayTarget.from_json(state["relay"])
        if via is None:  # never its address instead: that is the workload's own loopback
            return None
    return (host if isinstance(host, str) and host else None), port, via


class _SocketTransport(httpx.HTTPTransport):
    """httpx over the runner's socket (relayed by its bridge), its long path made short."""

    def __init__(self, path: str) -> None:
        self._address = bridge.unix_address(path)
        super().__init__(uds=self._address.__enter__(), trust_env=False)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._address.__exit__(None, None, None)


class _RelayTransport(httpx.HTTPTransport):
    """httpx through a node agent's relay: each new connection is one the relay handed to
    the workload (``cluster.relay.connect``); kept alive as any other."""

    def __init__(self, target: RelayTarget) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(network_backend=_RelayBackend(target))


class _RelayBackend(httpcore.SyncBackend):
    def __init__(self, target: RelayTarget) -> None:
        self.target = target

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **_: Any) -> Any:
        try:
            return SyncStream(relay_connect(self.target, timeout or 10.0))
        except TimeoutError as error:
            raise httpcore.ConnectTimeout(str(error)) from error
        except OSError as error:
            raise httpcore.ConnectError(str(error)) from error
