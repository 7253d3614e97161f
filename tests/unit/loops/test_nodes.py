"""The Ray pool's head watch (``loops.nodes.Head``), with a head, a client and a clock that
the test drives: a head whose port stops answering is told to the client at once; an ended
head of this server is started again after a short wait, longer after each failed start,
never while something else listens on its port, and the bridge is reconnected."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gpupool.cluster.process import RayStartError
from gpupool.loops.nodes import HEAD_RESTART_FIRST_S, Head


@dataclass
class FakeHead:
    running: bool = True
    pid: int = 4242
    stopped: int = 0

    def alive(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.stopped += 1


@dataclass
class FakeClient:
    address: str = "127.0.0.1:6380"
    lost_for: list[str] = field(default_factory=list)
    connects: int = 0

    def lost(self, why: str) -> None:
        self.lost_for.append(why)

    def connect(self, _timeout: float) -> bool:
        self.connects += 1
        return True


@dataclass
class FakeCluster:
    head: FakeHead | None
    client: FakeClient = field(default_factory=FakeClient)
    address: str = "127.0.0.1:6380"


class World:
    """The clock, the port's answers and the head starts the watch sees."""

    def __init__(self, port_open: bool = True, failing_starts: int = 0) -> None:
        self.now, self.port_open, self.failing_starts = 0.0, port_open, failing_starts
        self.started: list[FakeHead] = []

    def clock(self) -> float:
        return self.now

    def probe(self, _address: str) -> bool:
        return self.port_open

    def start(self, _abort: threading.Event) -> FakeHead:
        if self.failing_starts:
            self.failing_starts -= 1
            raise RayStartError("ray start ended with code 1")
        self.started.append(FakeHead())
        self.port_open = True
        return self.started[-1]


def watch(cluster: FakeCluster, world: World) -> Head:
    return Head(cluster, clock=world.clock, probe=world.probe, start=world.start)


def test_a_silent_port_makes_the_cluster_unreachable_after_two_looks() -> None:
    world, cluster = World(port_open=False), FakeCluster(head=None)  # attached: not our head
    watched = watch(cluster, world)
    watched.look()
    assert cluster.client.lost_for == []  # one failed connect may be a blip
    watched.look()
    assert cluster.client.lost_for == ["its port does not accept connections"]
    assert world.started == []  # not ours to start


def test_an_ended_head_starts_again_after_a_wait_growing_with_each_failure() -> None:
    world = World(port_open=False, failing_starts=1)
    cluster = FakeCluster(head=FakeHead(running=False))
    watched = watch(cluster, world)
    watched.look()
    assert cluster.client.lost_for == ["its process (pid 4242) has ended"]
    assert world.started == [] and cluster.head.stopped == 0  # waits first

    world.now += HEAD_RESTART_FIRST_S
    watched.look()  # fails: waits twice as long
    world.now += HEAD_RESTART_FIRST_S
    watched.look()
    assert world.started == []
    world.now += HEAD_RESTART_FIRST_S
    watched.look()
    assert world.started and cluster.head is world.started[0]
    assert cluster.client.connects == 1


def test_no_head_is_started_while_something_else_listens_on_its_port() -> None:
    world = World(port_open=True)
    cluster = FakeCluster(head=FakeHead(running=False))
    watched = watch(cluster, world)
    for _ in range(3):
        watched.look()
        world.now += HEAD_RESTART_FIRST_S
    assert world.started == []
    world.port_open = False
    world.now += 4 * HEAD_RESTART_FIRST_S
    watched.look()
    assert len(world.started) == 1
