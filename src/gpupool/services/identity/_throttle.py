"""Throttling of failed sign-ins and unknown API tokens, such that no caller's failures can
lock another caller out."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from gpupool.errors import TooManyAttempts, Unauthenticated
from gpupool.settings import Settings

Key = tuple[RateLimitItem, tuple[str, ...]]
log = logging.getLogger(__name__)

# How long a name that signed in from an address stays exempt from that address's own limit:
# long enough that a user who comes back days later is not locked out by a neighbour.
TRUSTED_SECONDS = 30 * 24 * 3600


class SignInThrottle:
    """Failed attempts counted in a moving window, by the kind of credential.

    **Random secrets** (API tokens, the join token; ``user`` None): checked first. Guessing
    256 random bits is hopeless at any rate, so refusing a valid one would buy nothing and
    would let anyone sharing its address (every process of the machine on 127.0.0.1, a job
    included) deny service to it. Only failures are counted, per client address; past
    ``max_per_address`` of them, that address's failures are answered 429 (with the seconds
    to wait) instead of 401. A valid secret is never refused.

    **Passwords** (``user`` the name signed in as): refused while throttled before the
    password is looked at — were the right one let through, the throttle would tell a guesser
    which guess was right. Failures are counted three ways, and refuse:

    - per (name, address): past ``max_per_user``, that address for that name;
    - per address: past ``max_per_address``, that address for every name except the names that
      signed in from it lately (a password sprayer is stopped; its neighbours on the same
      address are not);
    - per name, from all addresses: past ``max_per_user``, only the addresses that failed on
      that name in the window. A guesser spread over many addresses gets one guess per fresh
      address once the name is over its limit (each address that guessed wrong is then out),
      while the name's owner, from an address that did not fail, still signs in.

    Token failures and password failures are counted apart: bad tokens never hold back a
    password. An ``address`` is where the caller is, as the API tells it: for a caller on
    this machine, its address and the account owning its socket (``api.deps.client_address``),
    so that a job's failures count against its owner's account, not against 127.0.0.1; for a
    job that reaches the API through its runner's bridge, the job ("job 12 (ann)"). A count
    that reaches its limit is logged (a warning naming the source), once per time it does.
    Successful attempts are not counted. The counts live in this object's memory
    (the Platform owns it): a restart forgets them, and each server counts its own.
    """

    def __init__(self, window_seconds: int, max_per_user: int, max_per_address: int) -> None:
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._per_user = RateLimitItemPerSecond(max_per_user, window_seconds)
        self._per_address = RateLimitItemPerSecond(max_per_address, window_seconds)
        self._trusted = RateLimitItemPerSecond(1, TRUSTED_SECONDS)

    @classmethod
    def from_settings(cls, settings: Settings) -> SignInThrottle:
        return cls(
            settings.signin_window_seconds,
            settings.signin_max_per_user,
            settings.signin_max_per_address,
        )

    @contextmanager
    def guard(self, address: str, user: str | None = None) -> Iterator[None]:
        """Check a credential in the block, which raises Unauthenticated for a wrong one.

        With ``user`` (a password): refuse first while throttled, count a failure, and
        remember a success. Without (a random secret): nothing is refused before the block;
        a failure is counted, and answered TooManyAttempts once the address is past its limit.
        """
        if user is not None:
            self.check(address, user)
        try:
            yield
        except Unauthenticated:
            if user is None:
                self.check(address)
            self.failed(address, user)
            raise
        if user is not None:
            self._signed_in(address, user)

    def check(self, address: str, user: str | None = None) -> None:
        """Raise TooManyAttempts, with the seconds to wait, while ``address`` is throttled
        for passwords of ``user`` (or, without ``user``, for unknown random secrets)."""
        waits = [self._wait(item, key) for item, key in self._refusing(address, user)]
        if waits:
            raise TooManyAttempts(max(waits))

    def failed(self, address: str, user: str | None = None) -> None:
        """Count one failed attempt from ``address`` (with the password of ``user``)."""
        for item, key in self._counted(address, user):
            if self._limiter.hit(item, *key) and self._is_full(item, key):
                log.warning("throttled: %s", _throttled_text(item, key))

    # -- helpers --------------------------------------------------------------------------

    def _refusing(self, address: str, user: str | None) -> list[Key]:
        """The counts past their limit that refuse this attempt."""
        if user is None:
            keys = [(self._per_address, ("token", address))]
        else:
            name = user.lower()
            keys = [(self._per_user, ("pair", name, address))]
            if not self._is_trusted(name, address):
                keys.append((self._per_address, ("address", address)))
            if self._has_failed(name, address):
                keys.append((self._per_user, ("user", name)))
        return [(item, key) for item, key in keys if not self._limiter.test(item, *key)]

    def _counted(self, address: str, user: str | None) -> list[Key]:
        if user is None:
            return [(self._per_address, ("token", address))]
        name = user.lower()
        return [
            (self._per_user, ("pair", name, address)),
            (self._per_address, ("address", address)),
            (self._per_user, ("user", name)),
        ]

    def _is_full(self, item: RateLimitItem, key: tuple[str, ...]) -> bool:
        return self._limiter.get_window_stats(item, *key).remaining == 0

    def _has_failed(self, name: str, address: str) -> bool:
        stats = self._limiter.get_window_stats(self._per_user, "pair", name, address)
        return stats.remaining < self._per_user.amount

    def _is_trusted(self, name: str, address: str) -> bool:
        return not self._limiter.test(self._trusted, "signed-in", name, address)

    def _signed_in(self, address: str, user: str) -> None:
        """Remember that ``user`` signed in from ``address`` (anew: the memory restarts)."""
        key = ("signed-in", user.lower(), address)
        self._limiter.clear(self._trusted, *key)
        self._limiter.hit(self._trusted, *key)

    def _wait(self, item: RateLimitItem, key: tuple[str, ...]) -> int:
        """Whole seconds until the oldest failure in the window leaves it (the limits
        library keeps wall-clock times)."""
        reset = self._limiter.get_window_stats(item, *key).reset_time
        return max(1, math.ceil(reset - time.time()))


def _throttled_text(item: RateLimitItem, key: tuple[str, ...]) -> str:
    """What an admin reads when a count reaches its limit: which, from where, for how long."""
    kind, *names = key
    what = {
        "token": "unknown tokens from {0}",
        "address": "failed sign-ins from {0}",
        "pair": "failed sign-ins as {0} from {1}",
        "user": "failed sign-ins as {0}",
    }[kind].format(*names)
    return f"{item.amount} {what} in {item.get_expiry()} s: its next are refused (429)"
