"""Counting what came and went between two cycles, for what the state keeps of them.

The items a cycle is given (allocations, pending jobs: frozen) mostly come again in the
next: what is counted of them is kept on the ``SchedulerState`` by a key that names each
(a job id, a job's task), and the next count takes that, less the items gone and plus those
come. An item under a key known but another object counts as gone and come.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter
from typing import TypeVar

T = TypeVar("T")

ALLOCATION_KEY = attrgetter("job_id", "task")  # what names an allocation among a snapshot's

# what ``recounted`` keeps for its next call: the items by key, and their counts
Counted = tuple[dict[Hashable, T], Counter]


def by_key(items: Sequence[T], key: Callable[[T], Hashable]) -> dict[Hashable, T]:
    """The items by ``key`` (the last of repeated ones); ``key`` best an ``attrgetter``,
    so that the loop runs in C: a pass over every job and allocation each cycle."""
    return dict(zip(map(key, items), items, strict=True))


def changes(known: dict[Hashable, T], present: dict[Hashable, T]) -> tuple[list[T], list[T]]:
    """The items of ``known`` gone from ``present`` and those come in it (another object
    under a key known: both)."""
    gone = [known[name] for name in known.keys() - present.keys()]
    come = [present[name] for name in present.keys() - known.keys()]
    get = known.get
    for name, item in present.items():
        was = get(name, item)
        if was is not item:
            gone.append(was)
            come.append(item)
    return gone, come


def recounted(
    last: Counted[T] | None,
    items: Sequence[T],
    key: Callable[[T], Hashable],
    weigh: Callable[[T], tuple[Hashable | None, int]],
) -> tuple[Counted[T] | None, Counter]:
    """``items`` counted by key (``weigh``: an item's key, None for none, and how many it
    counts for): the counts of the last call (``last``), less the items gone and plus those
    come, when fewer came and went than there are items; counted anew otherwise. Returns
    what to keep for the next call (None when a key is repeated: it would not tell the
    items apart) and the counts, never to be changed (they are kept)."""
    present = by_key(items, key)
    if len(present) != len(items):
        return None, _counted(items, weigh)
    if last is not None:
        known, counts = last
        gone, come = changes(known, present)
        if len(gone) + len(come) < len(items):
            counts = counts.copy()
            for item in gone:
                _add(counts, weigh(item), -1)
            for item in come:
                _add(counts, weigh(item), 1)
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
