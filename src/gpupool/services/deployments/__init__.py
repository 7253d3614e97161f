"""Model deployments: replicas rolled out, health-checked, routed to and guarded by keys.

Making, scaling, updating and stopping deployments (``_deployments``); how their replicas
are reconciled and their routes published into the proxy's table (``_rollouts``: its rules
and the publisher, ``Serving``; ``_replicas``, ``_routing``; the pipeline that runs them is
``gpupool.loops.rollouts``); deployment keys and who may call a deployment (``_access``:
``admit``, the table's rule for deployments); what these services need of the server beyond
``core.Submits`` (``_ports``). It imports ``services.core``, ``identity``, ``jobs`` (replicas are
jobs) and ``models``, and the proxy's table; nothing in services builds on it but the
composition root.
"""

from __future__ import annotations

from gpupool.services.deployments._access import (
    admit,
    create_key,
    is_key,
    key_holder,
    list_keys,
    published_under,
    revoke_key,
    unknown,
)
from gpupool.services.deployments._deployments import create as new_deployment
from gpupool.services.deployments._deployments import (
    create_deployment,
    list_deployments,
    scale_deployment,
    show_deployment,
    stop_deployment,
    update_deployment,
)
from gpupool.services.deployments._ports import DeploymentSide
from gpupool.services.deployments._rollouts import Probe, Serving, probes, roll

__all__ = [
    "DeploymentSide",
    "Probe",
    "Serving",
    "admit",
    "create_deployment",
    "create_key",
    "is_key",
    "key_holder",
    "list_deployments",
    "list_keys",
    "new_deployment",
    "probes",
    "published_under",
    "revoke_key",
    "roll",
    "scale_deployment",
    "show_deployment",
    "stop_deployment",
    "unknown",
    "update_deployment",
]
