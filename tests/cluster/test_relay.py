"""The node agent's relay (``cluster.relay``) on its own, without a pool: a real relay on
127.0.0.1 before a real runner's bridge (``runner.bridge``, served in a thread here rather
than in a workload's namespace) to a real TCP server. What a user of a pool meets through it
is in test_listen.py; here, what a pool's test cannot arrange: the relay's cap on clients
that have not proven a key, its deadline for them, and an attempt that does not serve."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.cluster import relay
from gpupool.domain.endpoints import Endpoint, RelayTarget
from gpupool.executors.base import listening
from gpupool.runner import bridge
from gpupool.runner.network import LISTEN_SOCKET

JOB, ATTEMPT = 5, 1


@dataclass
class Served:
    relay: relay.Relay
    target: RelayTarget


def echo(listener: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while True:
            conn, _ = listener.accept()
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data.upper())


def bridged(path: Path, port: int) -> socket.socket:
    listener = bridge.listen(str(path))
    slots = threading.BoundedSemaphore(8)

    def serve() -> None:
        with contextlib.suppress(OSError):
            bridge.serve(listener, port, slots)

    threading.Thread(target=serve, daemon=True).start()
    return listener


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    attempt_dir = tmp_path / "jobs" / str(JOB) / "attempts" / str(ATTEMPT)
    attempt_dir.mkdir(parents=True)
    workload = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=echo, args=(workload,), daemon=True).start()
    runner_socket = bridged(attempt_dir / LISTEN_SOCKET, workload.getsockname()[1])
    agent = relay.Relay(relay.listen("127.0.0.1"), os.urandom(32), tmp_path / "jobs", 1.0)
    try:
        yield Served(agent.start(), agent.target(JOB, ATTEMPT))
    finally:
        agent.close()
        runner_socket.close()
        workload.close()


def talk(target: RelayTarget) -> bytes:
    with relay.connect(target, 10) as conn:
        conn.sendall(b"hello")
        conn.shutdown(socket.SHUT_WR)
        return conn.recv(100)


def test_a_client_with_the_attempts_key_reaches_its_workload(served: Served) -> None:
    assert talk(served.target) == b"HELLO"
    assert served.target.key not in repr(served.target)  # a target logged keeps its key


def test_clients_that_prove_nothing_are_capped_and_given_a_deadline(served: Served) -> None:
    address = (served.target.host, served.target.port)
    waiting = [socket.create_connection(address, 10) for _ in range(relay.MAX_UNAUTHENTICATED)]
    try:
        for conn in waiting:  # each got its challenge, and says nothing
            assert conn.recv(200).startswith(b'{"version": 1')
        with socket.create_connection(address, 10) as one_more:
            assert one_more.recv(200) == b""  # closed at once, without a challenge
        for conn in waiting:  # the deadline passes: each is closed without a word
            assert conn.recv(200) == b""
    finally:
        for conn in waiting:
            conn.close()
    assert talk(served.target) == b"HELLO"  # their places free again


def test_an_attempt_that_does_not_serve_is_refused(served: Served) -> None:
    absent = served.relay.target(JOB, ATTEMPT + 1)
    with pytest.raises(ConnectionRefusedError):
        relay.connect(absent, 10)


def test_the_secret_is_kept_for_an_agent_that_comes_back(tmp_path: Path) -> None:
    record = tmp_path / "cluster" / "relay.json"
    assert relay.open_kept(record, tmp_path / "jobs", None) is None  # nothing asked yet
    first = relay.open_kept(record, tmp_path / "jobs", "127.0.0.1")
    assert first is not None
    key = first.target(JOB, ATTEMPT)
    first.close()
    assert record.stat().st_mode & 0o777 == 0o600
    again = relay.open_kept(record, tmp_path / "jobs", None)
    assert again is not None
    try:
        assert again.target(JOB, ATTEMPT) == key  # same address, port and key
    finally:
        again.close()


def test_the_server_reads_a_relay_from_an_attempts_state_and_nothing_else() -> None:
    recorded = {"host": "10.0.0.5", "port": 41000, "key": "ab" * 32, "job_id": 7, "attempt": 2}
    state = {"node": "n1", "host": "127.0.0.1", "port": 8000, "relay": recorded}
    target = RelayTarget("10.0.0.5", 41000, "ab" * 32, 7, 2)
    assert listening(state) == Endpoint("127.0.0.1", 8000, relay=target)
    for bad in ({**recorded, "port": 70000}, {**recorded, "job_id": "../7"}, {}, "x"):
        # never the address instead: on the server's machine, that port is anybody's
        assert listening({**state, "relay": bad}) is None


def test_a_serving_attempt_whose_agent_gave_no_relay_has_no_endpoint() -> None:
    from gpupool.cluster.executor import _task_state

    local = {"attempt_dir": "/d", "host": "127.0.0.1", "port": 8000, "socket": "/d/listen.sock"}
    assert listening(_task_state("n1", local)) is None  # not the server's 8000
    on_the_nodes_network = {"attempt_dir": "/d", "host": "10.0.0.5", "port": 41000}
    assert listening(_task_state("n1", on_the_nodes_network)) == Endpoint("10.0.0.5", 41000)
