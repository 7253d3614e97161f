"""Model deployments: replicas rolled out, health-checked, routed to and guarded by keys.

Making, scaling, updating and stopping deployments (``_deployments``); how their replicas
are reconciled and the /serve routing table published (``_rollouts``: its rules and the
table's holder, ``Serving``; ``_replicas``, ``_routing``; the pipeline that runs them is
``gpupool.loops.rollouts``); deployment keys and who may call a deployment (``_access``);
what these services need of the server beyond ``Context`` (``_ports``). It imports
``services.core``, ``identity``, ``jobs`` (replicas are jobs) and ``models``; nothing in
services builds on it but the composition root.
"""

from __future__ import annotations

from gpupool.services.deployments._access import (
    create_key,
    is_key,
    list_keys,
    revoke_key,
    route_for,
    route_for_key,
)
from gpupool.services.deployments._deployments import (
    create_deployment,
    list_deployments,
    scale_deployment,
    show_deployment,
    stop_deployment,
    update_deployment,
)
from gpupool.services.deployments._rollouts import Probe, Serving, probes, roll
from gpupool.services.deployments._routing import Route

__all__ = [
    "Probe",
    "Route",
    "Serving",
    "create_deployment",
    "create_key",
    "is_key",
    "list_deployments",
    "list_keys",
    "probes",
    "revoke_key",
    "roll",
    "route_for",
    "route_for_key",
    "scale_deployment",
    "show_deployment",
    "stop_deployment",
    "update_deployment",
]
