"""Where a running workload that listens is reached: plain data, shared by the executors
(which say where their attempts listen: ``Executor.endpoint``), the proxy (which forwards to
them) and the capabilities that publish routes to them (notebooks, deployments).

A workload on the node's network is reached at its address. One with a network of its own
(the default on one node) listens inside it, on its own loopback: it is reached only
through its runner's socket on the node (``runner.bridge``), or, on a pool's node, through
that node agent's relay to the socket (``cluster.relay``: the agent's listener and the
attempt's key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_NUMBER = 2**62


@dataclass(frozen=True)
class RelayTarget:
    """What the server needs to reach one attempt through its node's agent: the agent's
    listener (``host``, ``port``), the attempt's key and numbers."""

    host: str
    port: int
    key: str = field(repr=False)  # never in a log line
    job_id: int
    attempt: int

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "key": self.key,
            "job_id": self.job_id,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, raw: object) -> RelayTarget | None:
        """The target an executor recorded, or None when it is not one."""
        if not isinstance(raw, dict):
            return None
        host, port, key = raw.get("host"), raw.get("port"), raw.get("key")
        job_id, attempt = raw.get("job_id"), raw.get("attempt")
        if not (isinstance(host, str) and host and isinstance(key, str) and key):
            return None
        if not all(number(n) for n in (job_id, attempt)) or not number(port) or port > 65535:
            return None
        return cls(host, port, key, job_id, attempt)  # type: ignore[arg-type]


Via = str | RelayTarget | None
"""How the platform reaches a workload with a network of its own: its runner's socket (a
path), its node agent's relay to that socket; None: at its address."""


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

    @property
    def url(self) -> str:
        """``http://host:port`` (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def number(value: object) -> bool:
    """A positive integer (not a bool) below ``MAX_NUMBER``: a job's, an attempt's, a port's."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < MAX_NUMBER


def port(value: object) -> int | None:
    """``value`` when it is a TCP port (1-65535), else None."""
    return value if number(value) and value < 65536 else None  # type: ignore[operator,return-value]
