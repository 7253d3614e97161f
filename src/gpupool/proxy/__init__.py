"""The proxy: how requests reach the workloads that serve — notebooks, and deployments'
replicas (listening jobs) — and which one.

One routing table (``_table.Routes``): each capability that serves publishes its routes into
it, of its own kind, with its rule of who may call them; a router makes one call,
``route(kind, key, caller)``, and forwards to what it gets (``_forward.Proxy``: HTTP and
WebSockets, kept-alive connections, a workload's cookies confined to its path, the platform's
own cookie and tokens never passed on: ``_forwarding``; /serve's small bodies through a
client of its own: ``_upstream``). The pipelines that ask a workload something outside a
request use ``client_via``.

It imports the runner's socket helpers and the cluster's relay (the ways to a workload with
a network of its own), ``domain`` and ``errors``: never services. The services publish into
it; the API's routers call it.
"""

from __future__ import annotations

from gpupool.proxy._clients import PLAIN_HTTP, client_via
from gpupool.proxy._forward import (
    PROXIED_METHODS,
    Proxy,
    ProxyAnswer,
    ProxyLimits,
    proxy_of,
    refuse_websocket,
)
from gpupool.proxy._table import Admit, KeyHolder, Kind, NoRoute, Route, Routes, Upstream, Who

__all__ = [
    "PLAIN_HTTP",
    "PROXIED_METHODS",
    "Admit",
    "KeyHolder",
    "Kind",
    "NoRoute",
    "Proxy",
    "ProxyAnswer",
    "ProxyLimits",
    "Route",
    "Routes",
    "Upstream",
    "Who",
    "client_via",
    "proxy_of",
    "refuse_websocket",
]
