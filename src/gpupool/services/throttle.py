"""Throttling of failed sign-ins and unknown API tokens, per user name and per client address."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from gpupool.errors import TooManyAttempts, Unauthenticated
from gpupool.settings import Settings


class SignInThrottle:
    """Failed attempts counted in a moving window, per user name and per client address.

    An address or a name that reached its limit is refused (429) until the window lets one
    more attempt in, before any password is looked at: were the right password let through,
    the throttle would tell a guesser which guess was right. Successful attempts are not
    counted. The counts live in this object's memory (the Platform owns it): a restart
    forgets them, and each server counts its own.
    """

    def __init__(self, window_seconds: int, max_per_user: int, max_per_address: int) -> None:
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._per_user = RateLimitItemPerSecond(max_per_user, window_seconds)
        self._per_address = RateLimitItemPerSecond(max_per_address, window_seconds)

    @classmethod
    def from_settings(cls, settings: Settings) -> SignInThrottle:
        return cls(
            settings.signin_window_seconds,
            settings.signin_max_per_user,
            settings.signin_max_per_address,
        )

    @contextmanager
    def guard(self, address: str, user: str | None = None) -> Iterator[None]:
        """Refuse while throttled; count the attempt as failed if the block raises
        Unauthenticated. ``user`` is the name signed in as (None for an API token)."""
        self.check(address, user)
        try:
            yield
        except Unauthenticated:
            self.failed(address, user)
            raise

    def check(self, address: str, user: str | None = None) -> None:
        """Raise TooManyAttempts, with the seconds to wait, while either is throttled."""
        waits = [
            self._wait(item, key)
            for item, key in self._keys(address, user)
            if not self._limiter.test(item, *key)
        ]
        if waits:
            raise TooManyAttempts(max(waits))

    def failed(self, address: str, user: str | None = None) -> None:
        for item, key in self._keys(address, user):
            self._limiter.hit(item, *key)

    def _keys(self, address: str, user: str | None) -> list[tuple[RateLimitItem, tuple[str, str]]]:
        keys = [(self._per_address, ("address", address))]
        if user is not None:
            keys.append((self._per_user, ("user", user.lower())))
        return keys

    def _wait(self, item: RateLimitItem, key: tuple[str, str]) -> int:
        """Whole seconds until the oldest failure in the window leaves it (the limits
        library keeps wall-clock times)."""
        reset = self._limiter.get_window_stats(item, *key).reset_time
        return max(1, math.ceil(reset - time.time()))
