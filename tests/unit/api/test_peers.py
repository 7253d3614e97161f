"""Who is on the other end of a local connection (``api.peers``), with real sockets: the
account owning a caller's socket, read from the kernel's table of this machine's sockets
(where the throttle's counts come from); and the job a caller on the server's Unix socket
relays for: the kernel names the connecting process (SO_PEERCRED), whose parent (its runner)
works in the attempt's directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpupool.api import peers
from gpupool.api.peers import socket_owner


@contextmanager
def connected(family: int, host: str) -> Iterator[tuple[tuple, tuple]]:
    """A real connection on ``host``: the caller's address and the server's end."""
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        with socket.create_connection(server.getsockname()[:2]) as _caller:
            accepted, peer = server.accept()
            with accepted:
                yield peer[:2], accepted.getsockname()[:2]


def test_a_local_caller_is_told_by_the_account_owning_its_socket() -> None:
    with connected(socket.AF_INET, "127.0.0.1") as (peer, local):
        assert socket_owner(peer, local) == os.getuid()
        assert socket_owner(local, peer) == os.getuid()  # the server's own end is found too
        assert socket_owner((peer[0], peer[1] ^ 1), local) is None  # no such socket


def test_an_ipv6_local_caller_too() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        with connected(socket.AF_INET6, "::1") as (peer, local):
            owner = socket_owner(peer, local)
    except OSError as error:
        pytest.skip(f"no ::1 here: {error}")
    assert owner == os.getuid()


def test_a_remote_or_unnamed_caller_has_no_account() -> None:
    assert socket_owner(("10.9.8.7", 40000), ("127.0.0.1", 8000)) is None
    assert socket_owner(("testclient", 50000), ("testserver", 80)) is None


# -- bridged sources -------------------------------------------------------------------------------


# The job a caller on the server's Unix socket relays for: the kernel names the connecting
# process (SO_PEERCRED), whose parent (its runner) works in the attempt's directory.

# As a runner does: work in the attempt's directory and fork a child (the bridge) that
# connects to the server's socket, then wait until the test has looked.
RUNNER = """
import os, socket, sys, time
os.chdir(sys.argv[2])
if os.fork() == 0:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.recv(1)
    os._exit(0)
os.wait()
"""


def test_a_bridge_is_named_by_the_attempt_its_runner_works_in(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    attempt = jobs / "12" / "attempts" / "3"
    attempt.mkdir(parents=True)
    assert _job_seen(tmp_path, attempt, jobs) == 12


def test_a_process_outside_an_attempt_is_no_job(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    (jobs / "12" / "outputs").mkdir(parents=True)
    assert _job_seen(tmp_path, jobs / "12" / "outputs", jobs) is None
    assert _job_seen(tmp_path, tmp_path, jobs) is None


def test_only_a_unix_socket_has_a_peer_pid() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname()):
        accepted, _ = server.accept()
        with accepted:
            assert peers.unix_peer_pid(accepted) is None
    assert peers.unix_peer_pid(None) is None


def _job_seen(tmp_path: Path, workdir: Path, jobs: Path) -> int | None:
    """Run a stand-in runner in ``workdir``; the job its child's connection is counted as."""
    path = str(tmp_path / "api.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen(1)
        runner = subprocess.Popen([sys.executable, "-c", RUNNER, path, str(workdir)])
        try:
            server.settimeout(30)
            caller, _ = server.accept()
            with caller:
                pid = peers.unix_peer_pid(caller)
                assert pid is not None and pid != runner.pid and pid != os.getpid()
                found = peers.bridged_job(pid, jobs)
                caller.sendall(b"x")
        finally:
            runner.wait(30)
        os.unlink(path)
    return found
