"""Blocking HTTP clients of one workload, for the pipelines that ask it something outside a
request (a replica's health check, a notebook's kernels): at its address, or through its
runner's socket, or its node agent's relay to that socket (``domain.endpoints.Via``)."""

from __future__ import annotations

import ssl
from typing import Any

import httpcore
import httpx
from httpcore._backends.sync import SyncStream

from gpupool.cluster.relay import connect as relay_connect
from gpupool.domain.endpoints import RelayTarget, Via
from gpupool.runner import bridge

# Workloads are reached over plain HTTP. Without a context of its own, httpx makes one for
# every client and transport, loading the system's CA certificates: 17 ms of CPU each time
# (a health check, a look at a notebook). This one is made once and verifies against no CA
# at all: an https URL, which no workload has, would fail its handshake, never go through.
PLAIN_HTTP = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def client_via(via: Via, timeout: httpx.Timeout | float) -> httpx.Client:
    """An HTTP client through ``via`` (see ``Via``). Close it after use."""
    options: dict[str, Any] = {
        "timeout": timeout,
        "trust_env": False,
        "follow_redirects": False,
        "verify": PLAIN_HTTP,
    }
    if isinstance(via, RelayTarget):
        return httpx.Client(transport=_RelayTransport(via), **options)
    if via is not None:
        return httpx.Client(transport=_SocketTransport(via), **options)
    return httpx.Client(**options)


class _SocketTransport(httpx.HTTPTransport):
    """httpx over the runner's socket (relayed by its bridge), its long path made short."""

    def __init__(self, path: str) -> None:
        self._address = bridge.unix_address(path)
        super().__init__(uds=self._address.__enter__(), trust_env=False, verify=PLAIN_HTTP)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._address.__exit__(None, None, None)


class _RelayTransport(httpx.HTTPTransport):
    """httpx through a node agent's relay: each new connection is one the relay handed to
    the workload (``cluster.relay.connect``); kept alive as any other."""

    def __init__(self, target: RelayTarget) -> None:
        super().__init__(trust_env=False, verify=PLAIN_HTTP)
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
