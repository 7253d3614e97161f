"""The MPI agent's service proves the job's secret without sending it, and caps who may wait
to prove it: real ``rsh`` and ``serve`` processes and plain sockets on 127.0.0.1, as an
attacker on the same network would use them."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.server import free_port
from tests.support.waiting import wait_for

from gpupool.runner import mpi_exec

WAIT = 60
SECRET = "5ec7e7" * 6
AGENT = [sys.executable, "-m", "gpupool.runner.mpi_exec"]
NONCE = "ab" * 32


def agent_env(port: int, **extra: str) -> dict[str, str]:
    hosts = json.dumps({"gpupool-task-1": f"127.0.0.1:{port}"})
    return os.environ | {"GPUPOOL_MPI_SECRET": SECRET, "GPUPOOL_MPI_HOSTS": hosts} | extra


@pytest.fixture
def task(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A serving task (its port and directory) that gives a header 2 s in all."""
    yield from serving(tmp_path, "2")


@pytest.fixture
def slow_task(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The same, giving a header 5 s."""
    yield from serving(tmp_path, "5")


def serving(tmp_path: Path, header_seconds: str) -> Iterator[tuple[int, Path]]:
    port, cwd = free_port(), tmp_path / "task1"
    cwd.mkdir()
    env = agent_env(port, GPUPOOL_MPI_LISTEN=f"127.0.0.1:{port}", GPUPOOL_TASK_INDEX="1")
    env["GPUPOOL_MPI_HEADER_SECONDS"] = header_seconds
    process = subprocess.Popen([*AGENT, "serve"], cwd=cwd, env=env)
    wait_for(lambda: answers(port), WAIT, "the task to listen")
    yield port, cwd
    process.kill()
    process.wait()


def test_the_agent_sends_a_proof_for_the_tasks_nonce_never_the_secret() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        agent = subprocess.Popen(
            [*AGENT, "rsh", "gpupool-task-1", "echo", "hi"],
            env=agent_env(port, GPUPOOL_TASK_INDEX="0"),
            stderr=subprocess.PIPE,
        )
        listener.settimeout(WAIT)
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(WAIT)
            conn.sendall(json.dumps({"version": 2, "nonce": NONCE}).encode() + b"\n")
            sent = read_line(conn)
            conn.sendall(mpi_exec.FRAME.pack(mpi_exec.EXIT, 1) + b"0")
        assert agent.wait(WAIT) == 0, agent.stderr.read() if agent.stderr else ""
    assert SECRET.encode() not in sent
    header = json.loads(sent)
    assert header["command"] == "echo hi"
    message = b"gpupool-mpi-exec 2\n" + NONCE.encode() + b"\necho hi"
    assert header["proof"] == hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()


def test_a_header_seen_on_the_wire_does_not_run_again(task: tuple[int, Path]) -> None:
    port, cwd = task
    seen = {"version": 2, "command": "touch ran"}
    seen["proof"] = mpi_exec.proof(SECRET, NONCE, "touch ran")  # for another connection's nonce
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as conn:
        assert mpi_exec.read_challenge(conn) != NONCE
        conn.sendall(json.dumps(seen).encode() + b"\n")
        assert conn.recv(64) == b""
    assert not (cwd / "ran").exists()


def test_connections_that_do_not_prove_the_secret_are_capped(task: tuple[int, Path]) -> None:
    port, _ = task
    with contextlib.ExitStack() as idle:
        for _ in range(mpi_exec.MAX_UNAUTHENTICATED):
            idle.enter_context(socket.create_connection(("127.0.0.1", port), timeout=WAIT))
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as one_more:
            assert one_more.recv(64) == b"", "closed at once, without a challenge"
    served = wait_for(lambda: rsh_true(port), WAIT, "the task to serve again")
    assert served.returncode == 0


def test_an_agent_turned_away_while_the_task_is_full_tries_again(
    slow_task: tuple[int, Path],
) -> None:
    """Connections that never prove the secret hold every place until the task drops them
    (5 s here); an agent that comes meanwhile is turned away, and tries again."""
    port, cwd = slow_task
    with contextlib.ExitStack() as idle:
        for _ in range(mpi_exec.MAX_UNAUTHENTICATED):
            conn = idle.enter_context(socket.create_connection(("127.0.0.1", port), WAIT))
            mpi_exec.read_challenge(conn)  # accepted: it holds a place
        argv = [*AGENT, "rsh", "gpupool-task-1", "touch", "ran"]
        env = agent_env(port, GPUPOOL_TASK_INDEX="0")
        agent = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT)
    assert agent.returncode == 0, agent.stderr
    assert (cwd / "ran").exists()


def test_a_header_sent_a_byte_at_a_time_is_dropped_at_the_deadline(
    task: tuple[int, Path],
) -> None:
    port, _ = task
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as conn:
        mpi_exec.read_challenge(conn)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                conn.sendall(b" ")
            except OSError:
                break  # dropped
            time.sleep(0.2)  # each byte well within any per-read timeout
        else:
            pytest.fail("the task kept a connection that never finished its header")


def read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def rsh_true(port: int) -> subprocess.CompletedProcess[str] | None:
    argv = [*AGENT, "rsh", "gpupool-task-1", "true"]
    env = agent_env(port, GPUPOOL_TASK_INDEX="0")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT)
    return done if done.returncode == 0 else None
