"""gpupool's rsh agent for MPI and the service the other tasks run for it (``python -m
gpupool.runner.mpi_exec serve | rsh ALIAS WORDS...``), run for real: both sides are real
processes talking over TCP on 127.0.0.1, as mpirun and a serving task do; and how the service
proves the job's secret without sending it and caps who may wait to prove it, against plain
sockets as an attacker on the same network would use them."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from gpupool.domain.launchers import MPI_ALIAS_PREFIX
from gpupool.runner import mpi_exec
from tests.support.server import free_port
from tests.support.waiting import wait_for

WAIT = 60  # seconds a test waits for a process before it fails instead of hanging
SECRET = "5ec7e7" * 6
AGENT = [sys.executable, "-m", "gpupool.runner.mpi_exec"]
# waits to be stopped; says so in files (the trap runs once the running sleep ends)
STOPPABLE = "trap 'echo $1 > stopped; exit 3' TERM; touch ready; while :; do sleep 0.05; done"


@dataclass
class Served:
    """A serving task (task 1) in its own directory, and the agent's environment to reach it."""

    process: subprocess.Popen[bytes]
    cwd: Path
    port: int
    env: dict[str, str]  # the rsh agent's, as task 0 has it

    def rsh(self, *words: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*AGENT, "rsh", "gpupool-task-1", *words],
            env=self.env | env,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )

    def start_rsh(self, *words: str) -> subprocess.Popen[str]:
        argv = [*AGENT, "rsh", "gpupool-task-1", *words]
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, text=True)


def agent_env(port: int, **extra: str) -> dict[str, str]:
    hosts = f'{{"gpupool-task-1": "127.0.0.1:{port}"}}'
    return os.environ | {"GPUPOOL_MPI_SECRET": SECRET, "GPUPOOL_MPI_HOSTS": hosts} | extra


def start_serve(cwd: Path, port: int) -> subprocess.Popen[bytes]:
    cwd.mkdir(exist_ok=True)
    env = agent_env(port, GPUPOOL_TASK_INDEX="1", GPUPOOL_MPI_LISTEN=f"127.0.0.1:{port}")
    return subprocess.Popen([*AGENT, "serve"], cwd=cwd, env=env | {"MARK": "task-1's env"})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    process = start_serve(tmp_path / "task1", port)
    yield Served(process, tmp_path / "task1", port, agent_env(port, GPUPOOL_TASK_INDEX="0"))
    with contextlib.suppress(psutil.Error):  # and the commands it runs (groups of their own)
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
    process.kill()
    process.wait()


def test_the_words_run_in_the_serving_tasks_shell_directory_and_environment(
    served: Served,
) -> None:
    # as mpirun writes them: words with shell quoting, joined by spaces, read by sh -c
    done = served.rsh("echo", '"$MARK', "in", "$(basename", '$PWD)"', ";", "echo", "oops", ">&2")
    assert (done.returncode, done.stdout, done.stderr) == (0, "task-1's env in task1\n", "oops\n")


@pytest.mark.parametrize(("words", "code"), [(["exit", "7"], 7), (["kill", "-9", "$$"], 137)])
def test_the_commands_exit_status_is_the_agents(
    served: Served, words: list[str], code: int
) -> None:
    assert served.rsh(*words).returncode == code


def test_a_wrong_secret_is_refused_without_running_anything(served: Served) -> None:
    refused = served.rsh("touch", "ran", GPUPOOL_MPI_SECRET="f" * 36)
    assert refused.returncode == 255
    assert "secret did not match" in refused.stderr
    assert not (served.cwd / "ran").exists()
    assert served.rsh("true").returncode == 0  # the service goes on


def test_a_header_that_is_not_the_protocols_gets_the_connection_closed(served: Served) -> None:
    with mpi_exec.connect(("127.0.0.1", served.port), time.monotonic() + WAIT) as conn:
        conn.settimeout(WAIT)
        assert mpi_exec.read_challenge(conn)
        conn.sendall(b"GET / HTTP/1.0\n\n")
        assert conn.recv(64) == b""


def test_an_unknown_alias_is_255_and_names_the_jobs_tasks(served: Served) -> None:
    done = subprocess.run(
        [*AGENT, "rsh", "gpupool-task-9", "true"], env=served.env, capture_output=True, text=True
    )
    assert done.returncode == 255
    assert "unknown host 'gpupool-task-9': this job's tasks are gpupool-task-1" in done.stderr


def test_a_task_that_never_answers_is_given_up_on_at_the_deadline() -> None:
    with pytest.raises(mpi_exec.MpiExecError, match="cannot connect to 127.0.0.1"):
        mpi_exec.connect(("127.0.0.1", free_port()), deadline=time.monotonic())


def test_its_own_tasks_alias_runs_here_without_the_network(tmp_path: Path) -> None:
    env = os.environ | {"GPUPOOL_TASK_INDEX": "0", "MARK": "here"}  # no secret, no hosts
    argv = [*AGENT, "rsh", "gpupool-task-0", "echo", '"$MARK";', "exit", "4"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT)
    assert (done.returncode, done.stdout) == (4, "here\n")


def test_the_agent_waits_for_a_task_that_is_still_starting(tmp_path: Path) -> None:
    port = free_port()
    agent = subprocess.Popen(
        [*AGENT, "rsh", "gpupool-task-1", "echo", "late"],
        env=agent_env(port, GPUPOOL_TASK_INDEX="0"),
        stdout=subprocess.PIPE,
        text=True,
    )
    serve = start_serve(tmp_path / "task1", port)
    try:
        out, _ = agent.communicate(timeout=WAIT)
        assert (agent.returncode, out) == (0, "late\n")
    finally:
        serve.kill()
        serve.wait()


def test_it_serves_several_commands_at_once(served: Served) -> None:
    first = served.start_rsh("while", "[", "!", "-e", "go", "];", "do", "sleep", "0.05;", "done")
    assert served.rsh("touch", "go").returncode == 0  # the first still runs meanwhile
    assert first.wait(timeout=WAIT) == 0


def test_a_stop_ends_the_running_commands_and_the_service_with_0(served: Served) -> None:
    agent = served.start_rsh(STOPPABLE.replace("$1", "stop"))
    wait_for(lambda: (served.cwd / "ready").exists(), WAIT, "the command to start")
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=WAIT) == 0
    assert agent.wait(timeout=WAIT) == 3  # the command's own exit, relayed
    assert (served.cwd / "stopped").read_text() == "stop\n"


@pytest.mark.parametrize(
    "closes", ["", "exec >/dev/null 2>&1;"], ids=["streams-open", "streams-closed"]
)
def test_an_agent_that_goes_away_hangs_its_command_up(served: Served, closes: str) -> None:
    agent = served.start_rsh(closes + STOPPABLE.replace("$1", "hang-up"))
    wait_for(lambda: (served.cwd / "ready").exists(), WAIT, "the command to start")
    agent.kill()  # as mpirun's agent is killed when mpirun aborts
    agent.wait()
    wait_for(lambda: (served.cwd / "stopped").exists(), WAIT, "the command to be hung up")
    assert (served.cwd / "stopped").read_text() == "hang-up\n"
    assert served.rsh("true").returncode == 0


def test_bad_invocations_say_what_is_wrong(tmp_path: Path) -> None:
    usage = subprocess.run([*AGENT, "rsh", "gpupool-task-1"], capture_output=True, text=True)
    assert (usage.returncode, usage.stderr.split(":")[0]) == (2, "usage")
    env = os.environ | {"GPUPOOL_MPI_SECRET": SECRET, "GPUPOOL_MPI_LISTEN": "nowhere"}
    serve = subprocess.run([*AGENT, "serve"], env=env, capture_output=True, text=True, timeout=WAIT)
    assert serve.returncode == 1
    assert "cannot listen: 'nowhere' is not host:port" in serve.stderr


def test_addresses_and_aliases_read_as_the_planner_writes_them() -> None:
    assert mpi_exec.parse_address("[fe80::1]:4101") == ("fe80::1", 4101)
    assert mpi_exec.parse_address("10.0.0.2:4101") == ("10.0.0.2", 4101)
    with pytest.raises(mpi_exec.MpiExecError):
        mpi_exec.parse_address("10.0.0.2:0")
    assert mpi_exec.ALIAS_PREFIX == MPI_ALIAS_PREFIX


NONCE = "ab" * 32


# -- the secret proved, and who may wait to prove it -----------------------------------------------


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
