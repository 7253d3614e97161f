"""The job a caller on the server's Unix socket relays for: the kernel names the connecting
process (SO_PEERCRED), whose parent (its runner) works in the attempt's directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from gpupool.api import peers

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
