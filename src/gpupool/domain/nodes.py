"""A node's life in the pool: its state, and the changes to it an admin can read back.

A node is *up* while the pool reaches it and *down* once the cluster lost it. Apart from
that, an admin may *drain* it (no new work is placed there; what runs goes on to its end)
and *remove* it (it leaves the listings and the pool; registering again is a new join).
The scheduler sees one flag, ``schedulable``, derived from these three in one place
(``gpupool.services.cluster``'s ``settle``).
"""

from __future__ import annotations

from enum import StrEnum


class NodeState(StrEnum):
    UP = "up"  # the pool reaches it
    DOWN = "down"  # the cluster lost it (Ray's health checks, a lost node agent)


class NodeChange(StrEnum):
    """Machine-readable reasons of a node's events (PascalCase, as jobs' reasons are)."""

    JOINED = "Joined"  # registered for the first time, or again after it was removed
    REJOINED = "Rejoined"  # registered again after it was down
    DRAINED = "Drained"  # an admin keeps new work off it
    UNDRAINED = "Undrained"  # an admin lets new work on it again
    DOWN = "NodeDown"  # the cluster lost it
    UP = "NodeUp"  # the cluster reaches it again
    REMOVED = "Removed"  # an admin took it out of the pool
