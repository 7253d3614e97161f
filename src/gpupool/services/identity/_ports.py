"""What identity's services need of the running server beyond ``core.Reads`` and
``core.Writes``: the token cache (``_auth.TokenCache``), which knows who recently seen API
tokens belong to and forgets them when users, teams or tokens change, and the sign-in
throttle (``_throttle.SignInThrottle``). Each port has just what its calls use.

It lives with identity (not in ``services.core``) because these ports are identity's alone:
the shared context stays free of any capability's needs. The cache's and the throttle's own
faces (``core.TokenMemory``, ``core.Throttle``) stay in core: the cluster's join uses the
throttle too, and the cluster may not import identity.
"""

from __future__ import annotations

from typing import Protocol

from gpupool.scheduler.types import Clock
from gpupool.services.core import LoopSide, Reads, Tells, Throttle, TokenMemory, Writes
from gpupool.settings import Settings


class RecentTokens(Protocol):
    """What a look at the token cache needs, without a database read: the cache and the
    clock (``recent_token``)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def tokens(self) -> TokenMemory: ...


class TokenChecks(Writes, Protocol):
    """What checking an API token needs: the database, the clock, the token cache, and the
    throttle that counts unknown tokens per address (``by_token``)."""

    @property
    def tokens(self) -> TokenMemory: ...

    @property
    def throttle(self) -> Throttle: ...


class SignIns(Writes, Protocol):
    """What opening a web session needs: the database, the clock, the throttle of failed
    sign-ins, and the settings' session length (``sign_in``)."""

    @property
    def throttle(self) -> Throttle: ...

    @property
    def settings(self) -> Settings: ...


class PasswordChecks(Reads, Protocol):
    """What a user's change of its own password needs: the database, and the throttle that
    counts a wrong current password as a failed sign-in (``change_own_password``)."""

    @property
    def throttle(self) -> Throttle: ...


class Forgets(Reads, Protocol):
    """What a change to who may do what needs: the database, and the token cache, cleared
    once the change is committed (``add_member``, ``remove_member``)."""

    @property
    def tokens(self) -> TokenMemory: ...


class TokenRevokes(Forgets, Writes, Protocol):
    """What revoking a token needs: the database, the clock (when it was revoked) and the
    token cache (``revoke_token``)."""


class UserChanges(Forgets, Protocol):
    """What changing a user needs: the database, the token cache, and the control loop that
    reads the users' weights again (``change_user``)."""

    @property
    def loop(self) -> LoopSide: ...


class TeamDeletes(TokenRevokes, Tells, Protocol):
    """What deleting a team needs: the database, the clock, the token cache, and the control
    loop that reads the teams' quotas again (``delete_team``)."""
