"""What a service call needs of the running server, as small interfaces.

The services the API calls open their own transactions and tell the control loop what
changed, so they need the database, the clock, the settings and a side of the control loop.
They see them through these protocols, which ``services.platform.Platform`` (and the control
pipelines' face ``loops.LoopFace``, ``identity.TokenCache``, ``identity.SignInThrottle``,
``cluster.Cluster``) satisfy; a capability whose calls need more than ``Reads``, ``Writes``,
``Tells`` or ``Submits`` adds the members it uses in a port of its own (its ``_ports``). It
imports only its neighbours in ``services.core`` and no capability's types, so every
capability may import it without a cycle (tests/unit/services/test_packages.py checks there
is none).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from gpupool.domain.policy import Policy
from gpupool.domain.waiting import PendingReason
from gpupool.scheduler.types import Clock, NodeCapacity
from gpupool.services.core._access import Principal
from gpupool.services.core._estimates import Forecast
from gpupool.services.core._loop_stats import LoopStats
from gpupool.settings import Settings
from gpupool.store.db import Database

# what the cluster side is told when an admin removes a node: its name, after the commit
NodeRemoved = Callable[[str], None]


class LoopSide(Protocol):
    """The control loop as services see it: what it knows, and what they tell it."""

    @property
    def pending_reasons(self) -> Mapping[int, PendingReason]:
        """Job id -> why it waits, from the latest scheduling cycle."""
        ...

    def recent_nodes(self) -> tuple[NodeCapacity, ...]:
        """The nodes' capacities, read at most a second ago."""
        ...

    def forecast(self, now: float, job_id: int | None = None) -> Forecast:
        """Estimated starts of waiting jobs (a recent forecast that knows ``job_id``)."""
        ...

    def wake(self) -> None:
        """Schedule at once: jobs were submitted or cancelled."""
        ...

    def quotas_changed(self) -> None:
        """The teams or their quotas changed: read them again, and schedule."""
        ...

    def weights_changed(self) -> None:
        """Users' fair-share weights changed: read them again, and schedule."""
        ...

    def stops_recorded(self) -> None:
        """Stops were recorded on attempts by another thread (the storage watch): send them."""
        ...

    def policy_changed(self, policy: Policy) -> None:
        """The scheduler's live settings changed: every snapshot uses ``policy``; schedule."""
        ...

    @property
    def stats(self) -> LoopStats:
        """Job starts and ends and cycle times, counted since the server started."""
        ...


class TokenMemory(Protocol):
    """Who recently seen API tokens belong to (``services.identity.TokenCache``)."""

    def known(self, secret: str, now: float) -> Principal | None: ...

    def principal(self, db: Database, secret: str, now: float) -> Principal: ...

    def clear(self) -> None:
        """Forget every token: users, teams or tokens changed."""
        ...


class Throttle(Protocol):
    """Failed sign-ins (and wrong current passwords) per user and source, and unknown random
    secrets per source, refused with a 429 while too many; a valid secret is never refused
    (``services.identity.SignInThrottle``)."""

    def guard(self, address: str, user: str | None = None) -> AbstractContextManager[None]:
        """Check a credential in the block: a password is refused first while throttled, a
        random secret only once found unknown; count the failure if the block raises
        Unauthenticated."""
        ...

    def check(self, address: str, user: str | None = None) -> None: ...

    def failed(self, address: str, user: str | None = None) -> None: ...


class ClusterSide(Protocol):
    """The Ray pool as services see it (``services.cluster.Cluster``)."""

    @property
    def address(self) -> str: ...

    def state(self) -> Any: ...

    def join_answer(self, token: str) -> dict[str, Any]: ...

    def removed(self, name: str) -> None: ...


class Reads(Protocol):
    """What a call that only reads the database needs: the database."""

    @property
    def db(self) -> Database: ...


class Writes(Reads, Protocol):
    """What a change stamped with the time needs: the database and the clock."""

    @property
    def clock(self) -> Clock: ...


class Tells(Writes, Protocol):
    """What a call needs that the control loop must hear of (or that shows what the loop
    knows: why a job waits, the nodes' capacities): the database, the clock and the loop."""

    @property
    def loop(self) -> LoopSide: ...


class Submits(Tells, Protocol):
    """What a submit needs: the database, the clock, the loop, and the settings' limits."""

    @property
    def settings(self) -> Settings: ...
