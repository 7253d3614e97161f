"""The joiner's keeper, with a node and a head that the test drives: a node that ended is
started again once the head answers, waiting longer after each failed start; a node of a
head that went away and came back starts anew; the node's work is stopped once the head has
been silent for the pool's node_lost_seconds, once per outage."""

from __future__ import annotations

import threading
from pathlib import Path

from gpupool.cluster import join
from gpupool.cluster.join import Joined, JoinRequest, NodeKeeper
from gpupool.cluster.probe import HeadProbe
from gpupool.cluster.process import RayStartError


class FakeNode:
    """A Ray node: the first ``failures[0]`` starts (of it and the nodes made ``again``)
    fail; ``log`` says what was done."""

    def __init__(self, log: list[str], failures: list[int] | None = None) -> None:
        self.log, self.failures, self.running = log, failures or [0], True

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False
        self.log.append("stop")

    def again(self) -> FakeNode:
        node = FakeNode(self.log, self.failures)
        return node

    def start(self, _timeout: float, abort: threading.Event | None = None) -> None:
        self.log.append("start")
        if self.failures[0]:
            self.failures[0] -= 1
            raise RayStartError("ray start ended with code 1: ...\nConnectionError: refused")
        self.running = True

    def save(self, _path: Path) -> None:
        self.log.append("save")


class Head:
    def __init__(self) -> None:
        self.up, self.now = True, 0.0

    def probe(self, _address: str) -> bool:
        return self.up

    def clock(self) -> float:
        return self.now


def keeper(tmp_path: Path, node: FakeNode, head: Head, said: list[str]) -> NodeKeeper:
    request = JoinRequest("http://127.0.0.1:1", "gpj_x", "n1", tmp_path / "n1")
    joined = Joined(node, 1.0, 2.0, request, "127.0.0.1:6380", lost_seconds=5.0)
    kept = NodeKeeper(joined, said.append, threading.Event(), clock=head.clock)
    kept.probe = HeadProbe(joined.head, clock=head.clock, probe=head.probe)
    return kept


def test_an_ended_node_starts_again_with_a_growing_wait(tmp_path: Path) -> None:
    head, said, log = Head(), [], []
    kept = keeper(tmp_path, FakeNode(log, failures=[2]), head, said)
    kept.joined.node.running = False  # Ray ended it

    kept.look()  # seen ended: cleared, first start after RESTART_FIRST_S
    assert log == ["stop"] and said[-1].startswith("the Ray node ended;")
    for wait in (join.RESTART_FIRST_S, join.RESTART_FIRST_S, 2 * join.RESTART_FIRST_S):
        head.now += wait
        kept.look()
    assert log == ["stop", "start", "start", "start", "save"]
    assert "did not start (ConnectionError: refused); again in 1 s" in said[1]
    assert "again in 2 s" in said[2]
    assert said[-1].startswith("the Ray node of n1 joined the head at 127.0.0.1:6380 again")
    assert kept.joined.node.alive()


def test_a_head_that_came_back_gets_a_new_node(tmp_path: Path) -> None:
    head, said, log = Head(), [], []
    kept = keeper(tmp_path, FakeNode(log), head, said)
    head.up = False
    kept.look()
    kept.look()
    assert log == []  # gone, and the node still runs: nothing to do yet
    head.up = True
    kept.look()
    assert log == ["stop", "start", "save"]
    assert said[0] == "the Ray head answers again: starting this node's Ray node anew to join it"


def test_the_work_stops_once_per_outage_after_node_lost_seconds(tmp_path: Path) -> None:
    head, said, log = Head(), [], []
    kept = keeper(tmp_path, FakeNode(log), head, said)
    head.up = False
    for _ in range(5):  # 4 s of silence
        kept.look()
        head.now += 1.0
    assert said == []
    kept.look()  # 5 s
    kept.look()
    assert len(said) == 1
    assert said[0].startswith("the Ray head at 127.0.0.1:6380 has not answered for 5.0 s")
    assert "stopped this node's running work (none)" in said[0]
