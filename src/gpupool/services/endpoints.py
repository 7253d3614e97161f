"""Where a job that listens (``JobSpec.listen``) serves: the proxy's upstream.

Its executor kept, in the attempt's executor state (so a restarted server finds it again),
the address and port it listens on and, for a workload with a network of its own, the
runner's socket through which alone it is reached (``runner.bridge``). A job that is not
running, or that does not listen, has no endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus
from gpupool.runner import bridge
from gpupool.services.control import node_addresses
from gpupool.store.models import AttemptModel, JobModel

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """An address and TCP port a running workload listens on; ``socket``: the runner's
    socket to connect to instead, when the address is inside the workload's own network
    namespace (the address then only names the workload's own view, for its Host header)."""

    host: str
    port: int
    socket: str | None = None

    def client(self, timeout: httpx.Timeout | float) -> httpx.Client:
        """An HTTP client of this endpoint alone (health checks, the notebook watch): through
        the runner's socket where there is one. Close it after use."""
        if self.socket is None:
            return httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False)
        return httpx.Client(
            transport=_SocketTransport(self.socket),
            timeout=timeout,
            trust_env=False,
            follow_redirects=False,
        )

    @property
    def url(self) -> str:
        """``http://host:port`` (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


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
        found[job_id] = Endpoint(host or addresses.get(node) or LOOPBACK, port, via)
    return found


def listens_at(
    executor_state: Mapping[str, Any] | None,
) -> tuple[str | None, int, str | None] | None:
    """The (host, port, runner's socket) an executor recorded for an attempt (a job over
    several nodes: its first task's), or None. The host is None when the executor did not
    say (then the node's address is used); the socket None for a workload on the node's
    network."""
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
