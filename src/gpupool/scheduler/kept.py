"""What one scheduling cycle keeps for the next (free capacity, queues, running jobs).

Each such object is a cache of what a cycle would otherwise work out from its snapshot: a
cycle brings it up to date with what changed and hands it on. One cycle at a time holds it
(a lock taken without waiting: another cycle meanwhile works out its own; the forecast
beside the control loop keeps objects of its own, ``own_kept``), and a cycle that fails
hands nothing on, so that no half-changed object is ever used again.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# the objects kept by the cycles of an ``own_kept`` block (None: outside one), by Kept
_SCOPE: ContextVar[dict[int, object] | None] = ContextVar("gpupool_kept_scope", default=None)


@contextmanager
def own_kept() -> Iterator[None]:
    """Within the block, the cycles hand on objects of their own, from one to the next, and
    leave those of the cycles outside it as they were: a forecast running the scheduler
    forward from another state, beside the control loop, would otherwise take the loop's
    objects over (its next cycle then works everything out anew) or, while it holds them,
    leave the loop's cycles nothing kept."""
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


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
        the cycle ends without an error is kept for the next (in an ``own_kept`` block, for
        the next cycle of the block)."""
        scope = _SCOPE.get()
        if scope is not None:  # one block's cycles run one after another: no lock
            own: Slot = Slot(scope.pop(id(self), None))
            yield own
            scope[id(self)] = own.value
            return
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


def by_identity(items: Sequence[T]) -> dict[int, T]:
    """The items by ``id``, as the kept objects tell what came and went (the last of
    repeated ones); the loop runs in C: a pass over every job and allocation each cycle."""
    return dict(zip(map(id, items), items, strict=True))


# what ``recounted`` keeps for its next call: the items by id (the entries hold their
# objects, so that an id known is its object's) and their counts
Counted = tuple[dict[int, T], Counter]


def recounted(
    last: Counted[T] | None,
    items: Sequence[T],
    weigh: Callable[[T], tuple[Hashable | None, int]],
) -> tuple[Counted[T] | None, Counter]:
    """``items`` counted by key (``weigh``: an item's key, None for none, and how many it
    counts for): the counts of the last call (``last``), less the items gone and plus those
    come, when fewer came and went than there are items; counted anew otherwise. Returns
    what to keep for the next call (None when an item is repeated: ids would not tell its
    copies apart) and the counts, never to be changed (they are kept)."""
    present = by_identity(items)
    if len(present) != len(items):
        return None, _counted(items, weigh)
    if last is not None:
        known, counts = last
        gone, come = known.keys() - present.keys(), present.keys() - known.keys()
        if len(gone) + len(come) < len(items):
            counts = counts.copy()
            for ident in gone:
                _add(counts, weigh(known[ident]), -1)
            for ident in come:
                _add(counts, weigh(present[ident]), 1)
            return (present, counts), counts
    counts = _counted(items, weigh)
    return (present, counts), counts


def _counted(items: Sequence[T], weigh: Callable[[T], tuple[Hashable | None, int]]) -> Counter:
    counts: Counter = Counter()
    for item in items:
        _add(counts, weigh(item), 1)
    return counts


def _add(counts: Counter, weighed: tuple[Hashable | None, int], sign: int) -> None:
    key, count = weighed
    if key is not None:
        counts[key] += sign * count
        if not counts[key]:
            del counts[key]
