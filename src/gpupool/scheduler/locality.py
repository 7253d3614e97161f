"""Locality: what each node holds of what jobs fetch before they start, for placement.

A job may fetch things onto each of its nodes before it starts (``PendingJob.wants``: an
environment, a dataset version, an image), unless the node holds them already
(``NodeCapacity.holds``). Placement (``placement.find_spot``) sends such a job, among the
spots where it fits now, to the node with the fewest bytes left to fetch (``Fetch.cost``);
equal spots keep the order of today's placement, so a job without wants places exactly as
before. It never makes a job wait for a holding node: it only chooses among spots that fit.

Within a cycle, a node where a task was placed counts as holding that task's wants for the
rest of the cycle (it will fetch them), so the other tasks of a gang, or of an array that
shares a dataset, follow it where they fit (``Locality.note``). ``Placement.held`` names only
what the node held in the snapshot: what the job will not fetch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set

from gpupool.scheduler.types import NodeCapacity, Placement, Want

EMPTY: frozenset[str] = frozenset()


class Locality:
    """One cycle's view of the nodes' holdings: the snapshot's, and what the placements of
    the cycle so far will fetch. Indexed when a job with wants first asks (a cycle of jobs
    without wants never builds it)."""

    def __init__(self, nodes: Sequence[NodeCapacity]) -> None:
        self._nodes = nodes
        self._holds: dict[str, frozenset[str]] | None = None
        self._holders: dict[str, set[str]] = {}  # key: the nodes holding it
        self._fetching: dict[str, set[str]] = {}  # node: keys its placements will fetch

    def _index(self) -> dict[str, frozenset[str]]:
        holds = self._holds
        if holds is None:
            holds = self._holds = {}
            holders = self._holders
            for node in self._nodes:
                if node.holds:
                    holds[node.name] = node.holds
                    for key in node.holds:
                        holders.setdefault(key, set()).add(node.name)
        return holds

    def held(self, node: str, wants: Iterable[Want]) -> tuple[str, ...]:
        """The keys of ``wants`` that ``node`` held in the snapshot (``Placement.held``)."""
        holds = self._index().get(node, EMPTY)
        return tuple(want.key for want in wants if want.key in holds)

    def lacking(self, node: str, wants: Iterable[Want]) -> int:
        """The bytes of ``wants`` that ``node`` neither holds nor fetches in this cycle (a
        want of unknown size counts as 1)."""
        holds = self._index().get(node, EMPTY)
        fetching = self._fetching.get(node, EMPTY)
        missing = [want for want in wants if want.key not in holds and want.key not in fetching]
        return sum(max(want.size, 1) for want in missing)

    def holders(self, wants: Sequence[Want]) -> Set[str]:
        """The nodes holding (or fetching in this cycle) any of ``wants``; not to be changed
        (one want's is the index's own set)."""
        self._index()
        if len(wants) == 1:
            return self._holders.get(wants[0].key, EMPTY)
        found: set[str] = set()
        for want in wants:
            found |= self._holders.get(want.key, EMPTY)
        return found

    def note(self, placements: Iterable[Placement], wants: Sequence[Want]) -> None:
        """A job's placements are final: their nodes fetch its wants, so they count as
        holding them for the rest of the cycle."""
        if not wants:
            return
        self._index()
        for placement in placements:
            fetching = self._fetching.setdefault(placement.node, set())
            for want in wants:
                fetching.add(want.key)
                self._holders.setdefault(want.key, set()).add(placement.node)

    def fetch(self, wants: tuple[Want, ...], prefer: bool = True) -> Fetch:
        """One job's view, for its placement; ``prefer``: False when placement is to ignore
        locality (``Policy.locality`` off) and only fill ``Placement.held``."""
        return Fetch(self, wants, prefer)


class Fetch:
    """What one job would fetch on each node: its wants less what the node holds (or will,
    this cycle), and the nodes its own tasks placed so far went to (they fetch it all)."""

    __slots__ = ("locality", "placed", "prefer", "wants")

    def __init__(self, locality: Locality, wants: tuple[Want, ...], prefer: bool) -> None:
        self.locality = locality
        self.wants = wants
        self.prefer = prefer
        self.placed: set[str] = set()

    def cost(self, node: str) -> int:
        """The bytes left to fetch on ``node`` (a want of unknown size counts as 1)."""
        if node in self.placed:
            return 0
        return self.locality.lacking(node, self.wants)

    def candidates(self) -> Set[str]:
        """The nodes where the cost is below the full cost: the nodes holding any want."""
        holders = self.locality.holders(self.wants)
        return holders | self.placed if self.placed else holders

    def held(self, node: str) -> tuple[str, ...]:
        return self.locality.held(node, self.wants)
