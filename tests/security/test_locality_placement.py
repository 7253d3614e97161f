"""Locality across teams (issue 25): what a node holds for one team's jobs (a dataset
version, an environment, an image) neither draws another team's job to that node nor is
named to it. Another team's placement records only what it wanted itself (``held``), and
places exactly as if the node held nothing of the first team's.

The scheduler is a pure function of its snapshot: these run it directly, with team a's
holdings on the nodes and team b's jobs in the queue."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler.types import Decisions, NodeCapacity, Want
from tests.support.scheduling import BEST_FIT, decide, gpu_node, pending, running

GB = 10**9
A_DATA = Want("dataset:" + "a" * 64, 500 * GB)
A_ENV = Want("env:sha256:" + "b" * 64, 2 * GB)
A_IMAGE = Want("image:sha256:" + "c" * 64, 30 * GB)
B_DATA = Want("dataset:" + "d" * 64, 50 * GB)


def pool(*, a_holds: bool) -> list[NodeCapacity]:
    """Two nodes; node-b, the emptier, holds team a's things (or nothing)."""
    keys = frozenset(w.key for w in (A_DATA, A_ENV, A_IMAGE)) if a_holds else frozenset()
    return [gpu_node("node-a", 4), replace(gpu_node("node-b", 4), holds=keys)]


def where_and_held(decisions: Decisions) -> list[tuple[int, str, tuple[str, ...]]]:
    return [(p.job_id, p.node, p.held) for p in decisions.placements]


@pytest.mark.parametrize("policy", [DEFAULT_POLICY, BEST_FIT], ids=["fgd", "best-fit"])
def test_another_teams_holdings_neither_draw_b_nor_are_named_to_it(policy) -> None:  # noqa: ANN001
    busy = [running(100, "node-a", [0], team="a", preemptible=False)]
    b_jobs = [
        replace(pending(1, team="b"), wants=(B_DATA,)),  # b's own dataset: on no node
        pending(2, team="b"),  # wants nothing
    ]

    beside_a = decide(pool(a_holds=True), b_jobs, busy, settings=policy)
    alone = decide(pool(a_holds=False), b_jobs, busy, settings=policy)

    assert where_and_held(beside_a) == where_and_held(alone)
    a_keys = {A_DATA.key, A_ENV.key, A_IMAGE.key}
    assert all(not a_keys & set(p.held) for p in beside_a.placements)
    assert all(p.held == () for p in beside_a.placements)


def test_b_holding_its_own_data_on_a_node_of_a_sees_only_its_own_key() -> None:
    nodes = pool(a_holds=True)
    nodes[1] = replace(nodes[1], holds=nodes[1].holds | {B_DATA.key})
    busy = [running(100, "node-a", [0], team="a", preemptible=False)]

    decisions = decide(nodes, [replace(pending(1, team="b"), wants=(B_DATA,))], busy)

    assert where_and_held(decisions) == [(1, "node-b", (B_DATA.key,))]
