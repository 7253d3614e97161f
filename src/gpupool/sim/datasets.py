"""Datasets in the simulator: what each job fetches onto its nodes, and each node's cache.

The model of the platform's dataset versions (and, alike, environments and images): each
job of a trace uses one of ``D`` datasets, chosen by its user with a seeded hash (one user's
jobs tend to use one dataset); each node keeps a cache of datasets, least recently used
first out once it holds more than ``cache_bytes``, never one a job on the node still uses. A
job placed on a node that lacks its dataset first fetches it there at ``bandwidth`` bytes a
second: its work starts that much later, and it holds its GPUs meanwhile, as the real
platform does. A dataset being fetched is shared: a second job placed there waits for the
same fetch, and fetches nothing. Each fetch has the whole bandwidth (concurrent fetches, on
one node or from one store, do not share it: the model is of bytes moved, and of time only
roughly). The scheduler sees each node's cache as
``NodeCapacity.holds`` (fetches under way included: the node will have it) and each job's
dataset as its ``PendingJob.wants``.
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from dataclasses import dataclass

from gpupool.scheduler.types import Want

GB = 10**9
DEFAULT_SIZES = (50 * GB, 200 * GB, 500 * GB)
DEFAULT_CACHE = 500 * GB  # per node: not all three of the default datasets at once
DEFAULT_GBPS = 10.0  # gigabits a second from the dataset store to one node


@dataclass(frozen=True, slots=True)
class Datasets:
    """The datasets of a replay: their sizes (bytes), each node's cache (bytes), the fetch
    bandwidth (bytes a second) and the seed of the users' choice of dataset."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    cache_bytes: int = DEFAULT_CACHE
    bandwidth: float = DEFAULT_GBPS * GB / 8
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.sizes or any(size < 0 for size in self.sizes):
            raise ValueError("datasets need one size or more, each 0 bytes or more")
        if self.cache_bytes < 0:
            raise ValueError("a node's dataset cache is 0 bytes or more")
        if not self.bandwidth > 0:
            raise ValueError("the fetch bandwidth is more than 0 bytes a second")

    def index_of(self, user: str) -> int:
        """The dataset a user's jobs use: a seeded hash of the user, the same in every run."""
        digest = hashlib.sha256(f"{self.seed}:{user}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % len(self.sizes)

    def want_of(self, user: str) -> Want:
        index = self.index_of(user)
        return Want(f"dataset:sim-{index}", self.sizes[index])


class NodeCaches:
    """Each node's datasets, least recently used first, with the jobs using each and when a
    fetch under way ends; and what was fetched, in all."""

    def __init__(self, datasets: Datasets) -> None:
        self.datasets = datasets
        self.kept: dict[str, OrderedDict[str, int]] = {}  # node: key -> size, LRU first
        self.ready: dict[tuple[str, str], float] = {}  # (node, key): when its fetch ends
        self.users: Counter[tuple[str, str]] = Counter()  # (node, key): jobs using it
        self.fetched_bytes = 0
        self.fetches = 0
        self.changed = True  # the holdings changed since ``holds`` was last read

    def holds(self, node: str) -> frozenset[str]:
        return frozenset(self.kept.get(node, ()))

    def use(self, node: str, want: Want, now: float) -> float:
        """A job placed on ``node`` uses ``want`` from now: fetched unless held (or being
        fetched). Returns when it is on the node."""
        kept = self.kept.setdefault(node, OrderedDict())
        where = (node, want.key)
        self.users[where] += 1
        if want.key in kept:
            kept.move_to_end(want.key)
            return max(now, self.ready.get(where, now))
        kept[want.key] = want.size
        ready = now + want.size / self.datasets.bandwidth
        self.ready[where] = ready
        self.fetched_bytes += want.size
        self.fetches += 1
        self.changed = True
        self._evict(node)
        return ready

    def release(self, node: str, want: Want) -> None:
        """A job on ``node`` that used ``want`` stopped (ended or preempted)."""
        where = (node, want.key)
        self.users[where] -= 1
        if self.users[where] <= 0:
            del self.users[where]
        kept = self.kept.get(node)
        if kept is not None and want.key in kept:
            kept.move_to_end(want.key)
        self._evict(node)

    def _evict(self, node: str) -> None:
        """Past the cache's size, the least recently used datasets no job uses leave."""
        kept = self.kept[node]
        used = sum(kept.values())
        for key in list(kept):
            if used <= self.datasets.cache_bytes:
                return
            if self.users[(node, key)] > 0:
                continue
            used -= kept.pop(key)
            self.ready.pop((node, key), None)
            self.changed = True
