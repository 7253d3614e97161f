"""The holdings pipeline: what the executor says each node holds is recorded on the nodes'
rows, only when it changed, and a node the pool does not know is passed over."""

from __future__ import annotations

from gpupool.loops.holdings import Holdings
from gpupool.store.db import Database
from gpupool.store.models import NodeModel
from tests.support.clock import ManualClock


def held(db: Database) -> dict[str, tuple[dict[str, int] | None, float | None]]:
    with db.reader() as session:
        return {n.name: (n.holds, n.holds_at) for n in session.query(NodeModel)}


def test_what_nodes_hold_is_recorded_when_it_changes(db: Database, clock: ManualClock) -> None:
    with db.reader() as session:
        node = session.query(NodeModel).one().name
    said: dict[str, dict[str, int]] = {node: {"dataset:" + "ab" * 32: 0}, "gone-node": {}}
    watch = Holdings(db, clock, lambda: {name: dict(h) for name, h in said.items()}, 10.0)
    assert held(db) == {node: (None, None)}  # no report yet: it holds nothing
    assert watch.tick() == 2
    first = clock.now()
    assert held(db) == {node: ({"dataset:" + "ab" * 32: 0}, first)}
    clock.advance(5.0)
    assert watch.tick() == 0  # the same: nothing written
    assert held(db)[node][1] == first
    said[node] = {"env:sha256:" + "cd" * 32: 4096}
    assert watch.tick() == 1
    assert held(db) == {node: ({"env:sha256:" + "cd" * 32: 4096}, first + 5.0)}
