"""The runner's socket protocol (``runner.bridge``), both ends with real sockets on this
machine: the bridge's serving loop runs in a thread here, in the test's own network
namespace (entering the workload's is the sandbox tests' part)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.runner import bridge


@pytest.fixture
def workload() -> Iterator[int]:
    """A workload's port: answers each connection with its peer's address, then echoes."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(f"hello {peer[0]}\n".encode())
                while data := conn.recv(4096):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _serving(path: Path, port: int) -> None:
    listener = bridge.listen(str(path))
    slots = threading.BoundedSemaphore(bridge.MAX_CONNECTIONS)
    threading.Thread(target=bridge.serve, args=(listener, port, slots), daemon=True).start()


def test_a_client_that_speaks_first_is_relayed(tmp_path: Path, workload: int) -> None:
    path = tmp_path / "listen.sock"
    _serving(path, workload)
    assert path.stat().st_mode & 0o777 == 0o600  # the runner's account alone
    with bridge.connect(str(path)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        got = b""
        while b"HTTP/1.1" not in got:
            got += sock.recv(4096)
    assert got.startswith(b"hello 127.0.0.1\n") and b"GET / HTTP/1.1" in got


def test_a_handoff_gives_the_workloads_own_connection(tmp_path: Path, workload: int) -> None:
    path = tmp_path / "listen.sock"
    _serving(path, workload)
    with bridge.handoff(str(path)) as sock:
        assert sock.family == socket.AF_INET and sock.getpeername()[1] == workload
        assert sock.recv(64) == b"hello 127.0.0.1\n"
        sock.sendall(b"ping")
        assert sock.recv(64) == b"ping"


def test_a_workload_not_listening_refuses_a_handoff(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    path = tmp_path / "listen.sock"
    _serving(path, port)
    with pytest.raises(ConnectionRefusedError):
        bridge.handoff(str(path))


def test_a_socket_path_longer_than_the_kernel_takes_still_works(
    tmp_path: Path, workload: int
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "listen.sock"
    assert len(str(path)) > 108
    _serving(path, workload)
    with bridge.handoff(str(path)) as sock:
        assert sock.recv(64) == b"hello 127.0.0.1\n"


def test_no_socket_means_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        bridge.handoff(str(tmp_path / "gone.sock"))
