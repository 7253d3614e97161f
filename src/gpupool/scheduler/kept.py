"""What one scheduling cycle keeps for the next (free capacity, queues, running jobs).

Each such object is a cache of what a cycle would otherwise work out from its snapshot: a
cycle brings it up to date with what changed and hands it on. One cycle at a time holds it
(a lock taken without waiting: another cycle meanwhile, such as the forecast beside the
control loop, works out its own), and a cycle that fails hands nothing on, so that no
half-changed object is ever used again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Slot(Generic[T]):
    """What the cycle before handed on (None: nothing), and what this one hands on."""

    value: T | None = None


class Kept(Generic[T]):
    """One object handed from cycle to cycle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: T | None = None

    @property
    def value(self) -> T | None:
        return self._value

    @contextmanager
    def lease(self) -> Iterator[Slot[T] | None]:
        """The slot for one cycle (None: another cycle holds it). What the slot holds when
        the cycle ends without an error is kept for the next."""
        if not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            slot: Slot[T] = Slot(self._value)
            self._value = None  # until handed back whole
            yield slot
            self._value = slot.value
        finally:
            self._lock.release()
