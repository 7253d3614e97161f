"""The pool's machines as services see them: nodes, the Ray cluster, the pool's views.

Nodes are registered, drained, marked down and removed here (``_nodes``); the Ray pool's
head, its bridge and joins are in ``_cluster`` (the node and head watches are
``gpupool.loops.nodes``); the pool page and its Prometheus figures in ``_pool`` and
``_pool_metrics``; node rows become read models in ``_views``; what its calls need of the
server beyond the core ports (the Ray pool, the own node) in ``_ports``. It imports only
``services.core`` of the services: identity, jobs and scheduling build on it.
"""

from __future__ import annotations

from gpupool.services.cluster._cluster import (
    Cluster,
    best_status,
    describe,
    health,
    join,
    join_token,
    node_name,
    start_head,
)
from gpupool.services.cluster._nodes import (
    ACTIVE,
    capacity,
    drain,
    get_node,
    list_nodes,
    mark_down,
    node_addresses,
    nothing_to_stop,
    record_holdings,
    register,
    remove,
    removed_names,
    show_node,
    undrain,
)
from gpupool.services.cluster._pool import show_pool
from gpupool.services.cluster._pool_metrics import read as read_pool_metrics

__all__ = [
    "ACTIVE",
    "Cluster",
    "best_status",
    "capacity",
    "describe",
    "drain",
    "get_node",
    "health",
    "join",
    "join_token",
    "list_nodes",
    "mark_down",
    "node_addresses",
    "node_name",
    "nothing_to_stop",
    "read_pool_metrics",
    "record_holdings",
    "register",
    "remove",
    "removed_names",
    "show_node",
    "show_pool",
    "start_head",
    "undrain",
]
