"""Holdings: what each node keeps of environments, dataset versions and images, recorded for
placement.

Every ``holdings_scan_seconds``, and soon after attempts start or end (woken, at most every
``MIN_REST_SECONDS``), the executor is asked (``Executor.holdings``: on one machine a listing
of its three caches, on a pool each node's agent lists its own) with no transaction open;
what changed since the last look is written to the nodes' rows in one transaction
(``services.cluster.record_holdings``), where the next snapshot reads it.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupool.loops.watch import Watch
from gpupool.scheduler.types import Clock
from gpupool.services import cluster
from gpupool.store.db import Database

MIN_REST_SECONDS = 2.0  # woken by every start and end: at most one look this often


class Holdings(Watch):
    """Asks what each node holds (``ask``: node -> key -> bytes) and records what changed."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        ask: Callable[[], dict[str, dict[str, int]]],
        interval: float,
    ) -> None:
        self.db, self.clock, self.ask = db, clock, ask
        self._said: dict[str, dict[str, int]] = {}  # what each node said last, as recorded
        super().__init__(
            "gpupool-holdings", "what the nodes hold", interval, True, MIN_REST_SECONDS
        )

    def tick(self) -> int:
        """One look; how many nodes' holdings changed."""
        found = self.ask()
        changed = {node: held for node, held in found.items() if self._said.get(node) != held}
        if changed:
            with self.db.session() as session:
                cluster.record_holdings(session, changed, self.clock.now())
            self._said.update(changed)
        return len(changed)
