"""A clock for tests: it moves only when the test moves it."""

from __future__ import annotations


class ManualClock:
    """A clock that moves only when a test moves it (``advance``); ``now`` starts at 1,000 s
    unless the test names the instant."""

    def __init__(self, now: float = 1_000.0) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
