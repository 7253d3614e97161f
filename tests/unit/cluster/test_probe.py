"""The head probe: a TCP connect to the GCS port, and since when the head has not answered
(two failed connects in a row make it gone: one may be a blip)."""

from __future__ import annotations

import socket

from tests.support.server import free_port

from gpupool.cluster.probe import HeadProbe, gcs_answers


class Answers:
    """A probe that answers from a script, and a clock the test moves."""

    def __init__(self, *answers: bool) -> None:
        self.answers, self.now = list(answers), 100.0

    def probe(self, _address: str) -> bool:
        return self.answers.pop(0)

    def clock(self) -> float:
        return self.now


def test_a_listening_port_answers_and_a_closed_one_does_not() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert gcs_answers(f"127.0.0.1:{listening.getsockname()[1]}")
    assert not gcs_answers(f"127.0.0.1:{free_port()}")


def test_the_head_is_gone_after_two_failed_connects_and_counts_from_the_first() -> None:
    script = Answers(True, False, False, False, True)
    probe = HeadProbe("127.0.0.1:1", clock=script.clock, probe=script.probe)
    assert probe.look() and probe.lost_for() == 0.0
    assert probe.look()  # one failed connect: not gone yet
    script.now += 1.0
    assert not probe.look()
    script.now += 4.0
    assert not probe.look()
    assert probe.lost_for() == 5.0
    assert probe.look() and probe.lost_for() == 0.0  # back: the count starts anew


def test_one_failed_connect_between_answers_is_a_blip() -> None:
    script = Answers(False, True, False, True)
    probe = HeadProbe("127.0.0.1:1", clock=script.clock, probe=script.probe)
    assert all(probe.look() for _ in range(4))
