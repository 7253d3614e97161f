"""What the deployments' services need of the running server beyond ``core.Submits``: the
proxy's routing table and the traffic counts (``_rollouts.Serving``).

It lives with the deployments (not in ``services.core``) because its types are theirs:
the shared context stays free of any capability's types, so every capability may import it.
"""

from __future__ import annotations

from typing import Protocol

from gpupool.proxy import Routes
from gpupool.services.core import Submits
from gpupool.services.deployments._routing import Traffic


class DeploymentSide(Protocol):
    """The deployments as the /serve route and services see them (``_rollouts.Serving``)."""

    @property
    def routes(self) -> Routes:
        """The proxy's table, where live deployments and their ready replicas are published."""
        ...

    @property
    def traffic(self) -> Traffic:
        """Requests and latency per deployment and replica (in memory)."""
        ...

    def changed(self, name: str) -> None:
        """A user changed deployment ``name`` (made, scaled, updated, stopped it, or its
        keys): publish its route now, and reconcile it at once."""
        ...


class DeploymentContext(Submits, Protocol):
    """The running server as a deployments' service call sees it: the database, the clock,
    the control loop and the settings, and the deployments' loop."""

    @property
    def deployments(self) -> DeploymentSide:
        """The deployments' routing table and traffic counts."""
        ...
