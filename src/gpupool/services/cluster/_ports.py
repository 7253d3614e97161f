"""What the pool's services need of the running server beyond ``core.Reads`` and
``core.Tells``: the Ray pool (``_cluster.Cluster``, None on one machine), the join's
throttle, the server's own node, and whom to tell of a removed node.

It lives with the cluster (not in ``services.core``) because these ports are the cluster's
alone: the shared context stays free of any capability's needs. The Ray pool's own face
(``core.ClusterSide``) stays in core, beside the throttle's (``core.Throttle``) that identity
shares.
"""

from __future__ import annotations

from typing import Protocol

from gpupool.services.core import ClusterSide, NodeRemoved, Reads, Tells, Throttle
from gpupool.settings import Settings


class Pool(Protocol):
    """What a look at the Ray pool needs: the pool, None when the server runs one machine
    (``health``)."""

    @property
    def cluster(self) -> ClusterSide | None: ...


class Joins(Pool, Reads, Protocol):
    """What a machine's join needs: the pool, the throttle that counts wrong join tokens
    per address, and the database (whether the joining node is up yet) (``join``)."""

    @property
    def throttle(self) -> Throttle: ...


class Describes(Pool, Protocol):
    """What the cluster's description needs: the pool, and the settings (the server's URL
    and the join token, shown to admins) (``describe``)."""

    @property
    def settings(self) -> Settings: ...


class NodeRemovals(Tells, Protocol):
    """What an admin's removal of a node needs: the database, the clock, the control loop,
    the server's own node (never removed), and whom to tell once it is committed
    (``_nodes.remove``)."""

    @property
    def own_node(self) -> str | None:
        """The name of the server's own node (None until it is discovered)."""
        ...

    @property
    def on_node_removed(self) -> NodeRemoved:
        """Told a node's name once an admin's removal of it is committed, so that the
        cluster side stops that node (the platform's default does nothing)."""
        ...
