"""A workload's own network namespace, made by the real runner and bubblewrap: the job sees
its own loopback only, serves there, is reached only through its runner's socket, and gets
egress through pasta's user-space NAT; the bridge and pasta end with the attempt."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psutil
import pytest
from runner_harness import RunnerHarness, bwrap, py, wait_for
from tests.support.outside import answer, outside_world

from gpupool.runner import bridge

PORT = 8000
SERVE = """
import socket
server = socket.create_server(("127.0.0.1", 8000))
print("serving", flush=True)
while True:
    conn, _ = server.accept()
    with conn:
        conn.sendall(b"from inside the job\\n")
        if conn.recv(16) == b"stop":
            break
"""
REACH = """
import socket, sys
for host, port in [(sys.argv[1], int(sys.argv[2])), ("127.0.0.1", int(sys.argv[3]))]:
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            print("REACHED", host, s.recv(64).decode().strip(), flush=True)
    except OSError as e:
        print("NOT", host, type(e).__name__, flush=True)
"""


@pytest.fixture
def boxed() -> Iterator[RunnerHarness]:
    if bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    h = RunnerHarness(sandboxed=True)
    yield h
    h.cleanup()
    shutil.rmtree(h.root, ignore_errors=True)


def test_a_serving_job_is_reached_only_through_its_runner(boxed: RunnerHarness) -> None:
    boxed.write_spec(py(SERVE), sandbox=_policy(boxed, {"mode": "isolated", "port": PORT}))
    runner = boxed.spawn()
    boxed.wait_for_log("serving")
    path = str(boxed.dir / "listen.sock")
    with bridge.handoff(path) as sock:
        assert sock.recv(64) == b"from inside the job\n"
    with socket.socket() as probe:  # the node's own loopback has no such listener
        assert probe.connect_ex(("127.0.0.1", PORT)) != 0 or _not_the_job(PORT)
    # forked at that first connection, and recorded right after
    bridge_pid = wait_for(lambda: boxed.state()["network"]["bridge_pid"], 10, "the bridge")
    state = boxed.state()
    assert psutil.pid_exists(bridge_pid)
    assert "no network egress" in " ".join(state.get("notes", []))  # none in its policy
    with bridge.handoff(path) as sock:
        sock.recv(64)
        sock.sendall(b"stop")
    assert boxed.wait_for_exit(runner) == 0
    assert boxed.state()["exit_code"] == 0
    assert not psutil.pid_exists(bridge_pid) or _zombie(bridge_pid), "the bridge ends with it"
    assert not os.path.exists(path)


CALLS_THE_API = """
import socket, sys
if sys.argv[1] == "call":
    with socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10) as s:
        print("API said", s.recv(64).decode().strip(), flush=True)
else:
    print("no call", flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the API's port inside the namespace: root")
@pytest.mark.parametrize("calls", [True, False])
def test_the_api_bridge_is_forked_at_the_first_call_and_only_then(
    boxed: RunnerHarness, calls: bool
) -> None:
    """A job calling the platform's API on its loopback as soon as it starts is answered
    (its call waits in the listener's backlog while the bridge forks); a job that never
    calls it has no bridge process at all."""
    path = str(boxed.root / "api.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    threading.Thread(target=answer, args=(server, b"hello\n"), daemon=True).start()
    port = 8123
    command = py(CALLS_THE_API) + (["call", str(port)] if calls else ["skip", "0"])
    network = {"mode": "isolated", "port": None, "api": {"port": port, "socket": path}}
    boxed.write_spec(command, sandbox=_policy(boxed, network))
    assert boxed.run().returncode == 0
    state = boxed.state()
    assert state["exit_code"] == 0, (state, boxed.log())
    if calls:
        assert "API said hello" in boxed.log()
        assert state["network"]["bridge_pid"] is not None
    else:
        assert "no call" in boxed.log()
        assert state["network"]["bridge_pid"] is None


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
def test_egress_goes_out_through_the_nat_and_the_nodes_loopback_stays_out(
    boxed: RunnerHarness,
) -> None:
    """In a network namespace this test makes (a veth pair, a route, as a machine has), a
    server on the 'outside' address answers the job; one on the loopback does not."""
    with outside_world() as world:
        command = py(REACH) + [world.outside, str(world.port), str(world.loopback_port)]
        policy = {"mode": "isolated", "egress": shutil.which("pasta"), "port": None}
        boxed.write_spec(command, sandbox=_policy(boxed, policy))
        done = world.run(boxed)
    assert done.returncode == 0, done.stderr
    log = boxed.log()
    pasta_log = boxed.dir / "pasta.log"
    said = pasta_log.read_text() if pasta_log.exists() else ""
    assert f"REACHED {world.outside} outside" in log, (log, boxed.state(), said)
    assert "NOT 127.0.0.1 ConnectionRefusedError" in log, log
    assert boxed.state()["exit_code"] == 0
    assert "notes" not in boxed.state() or not any("egress" in n for n in boxed.state()["notes"])


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
def test_the_pasta_of_a_runner_killed_with_9_is_stopped_at_the_next_start(
    boxed: RunnerHarness,
) -> None:
    from gpupool.executors.local import LocalExecutor
    from gpupool.runner.network import leftover_egress

    with outside_world() as world:
        policy = {"mode": "isolated", "egress": shutil.which("pasta"), "port": None}
        boxed.write_spec(
            py("import time; print('up', flush=True); time.sleep(60)"),
            sandbox=_policy(boxed, policy),
        )
        runner = world.call(boxed.spawn)
        boxed.wait_for_log("up")
        pasta = int((boxed.dir / "pasta.pid").read_text())
        assert leftover_egress(str(boxed.root)) == []  # its runner runs: not a leftover
        runner.kill()
        runner.wait()
        wait_for(lambda: leftover_egress(str(boxed.root)) == [pasta], 10, "pasta left behind")
        LocalExecutor(boxed.root, isolation=_isolation(boxed))
        wait_for(lambda: not psutil.pid_exists(pasta) or _zombie(pasta), 10, "pasta stopped")


def _isolation(h: RunnerHarness):  # noqa: ANN202 - an executors.isolation.Isolation
    from gpupool.executors.isolation import Isolation
    from gpupool.settings import Settings

    return Isolation(Settings(data_dir=h.root / "data"))


def _policy(h: RunnerHarness, network: dict[str, Any]) -> dict[str, Any]:
    from runner_harness import sandbox_policy

    return sandbox_policy(h.root) | {"network": network}


def _not_the_job(port: int) -> bool:
    """Something of the node listened on that port a moment ago (another test's process, as
    in make test): it must not be the job, which is still serving. Refused now: not the job."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    except ConnectionRefusedError:
        return True
    with sock:
        sock.settimeout(2)
        try:
            return sock.recv(64) != b"from inside the job\n"
        except OSError:
            return True


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_json_state_of_an_isolated_job_names_its_network(boxed: RunnerHarness) -> None:
    boxed.write_spec(py("print('hi')"), sandbox=_policy(boxed, {"mode": "isolated"}))
    assert boxed.run().returncode == 0
    state = json.loads((boxed.dir / "state.json").read_text())
    assert state["exit_code"] == 0 and "hi" in boxed.log()
    notes = " ".join(state.get("notes", []))
    assert "no network egress" in notes, "without pasta in its policy it says so"


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
def test_the_executor_starts_isolated_jobs_in_warm_namespaces_with_egress(tmp_path) -> None:  # noqa: ANN001
    """The node's executor, as the server makes it: its fork server keeps namespaces warm
    with pasta attached; each isolated job starts in one and reaches the outside through
    it; the warm ones end with the executor."""
    from gpupool.runner.warmnet import WARM_DIR

    with outside_world() as world:
        executor = world.call(lambda: _executor(tmp_path))
        try:
            command = py(REACH) + [world.outside, str(world.port), str(world.loopback_port)]
            seen = []
            for job in (1, 2):
                handle = world.call(lambda j=job: executor.start(_task(j, command)))
                _wait_exit(executor, handle)
                state = json.loads((executor.attempt_dir(job, 1) / "state.json").read_text())
                log = (executor.attempt_dir(job, 1) / "output.log").read_text()
                assert f"REACHED {world.outside} outside" in log, (log, state)
                assert "NOT 127.0.0.1 ConnectionRefusedError" in log, log
                assert state["exit_code"] == 0 and not state.get("notes"), state
                seen.append(state["network"]["warm"])
                executor.release(handle)
            warm = tmp_path / "jobs" / WARM_DIR
            waiting = _pastas_under(warm)
            assert waiting, "the next jobs' namespaces are warm already"
        finally:
            executor.close()
        wait_for(lambda: not any(psutil.pid_exists(p) for p in waiting), 10, "warm pasta ends")
        wait_for(lambda: not warm.exists(), 10, "the warm directory goes with its server")


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
@pytest.mark.parametrize("deep", [False, True], ids=["data-dir", "deep-data-dir"])
def test_a_namespace_left_empty_serves_the_next_job_of_the_same_account(
    tmp_path,  # noqa: ANN001
    deep: bool,
) -> None:
    """pasta's set-up is not paid again: the namespace of a job that ended holding nothing
    goes back to the fork server, and the next job of that account starts in it, with
    egress; its pasta still ends with the executor. A data directory so deep that the
    return socket's path is over the kernel's 108 bytes works the same."""
    from gpupool.runner.warmnet import RETURN_SOCKET, WARM_DIR

    if deep:
        tmp_path = tmp_path / ("deep" * 20)
        tmp_path.mkdir()
        assert len(str(tmp_path / "jobs" / WARM_DIR / RETURN_SOCKET)) > 108
    with outside_world() as world:
        executor = world.call(lambda: _executor(tmp_path))
        try:
            reach = py(REACH) + [world.outside, str(world.port), str(world.loopback_port)]
            states = []
            for job, command in ((1, py("print('hi')")), (2, reach)):
                handle = world.call(lambda j=job, c=command: executor.start(_task(j, c)))
                _wait_exit(executor, handle)
                states.append(json.loads((executor.attempt_dir(job, 1) / "state.json").read_text()))
                executor.release(handle)
            assert states[0]["network"]["warm"] == states[1]["network"]["warm"], states
            log = (executor.attempt_dir(2, 1) / "output.log").read_text()
            assert f"REACHED {world.outside} outside" in log, (log, states[1])
            assert "NOT 127.0.0.1 ConnectionRefusedError" in log, log
            assert states[1]["exit_code"] == 0 and not states[1].get("notes"), states[1]
            pastas = _pastas_under(tmp_path / "jobs" / WARM_DIR)
            assert pastas
        finally:
            executor.close()
        wait_for(lambda: not any(psutil.pid_exists(p) for p in pastas), 10, "pasta ends")


LEAVES_A_SOCKET = """
import socket
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname())
conn, _ = server.accept()
conn.close()  # closed first: its side waits in TIME_WAIT, in the namespace, for a minute
client.close()
print("left", flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
def test_a_namespace_still_holding_a_socket_is_not_given_to_the_next_job(tmp_path) -> None:  # noqa: ANN001
    """A connection of the last job waiting to close would keep its port from the next
    (a server that binds it without SO_REUSEADDR would fail): that namespace is discarded."""
    with outside_world() as world:
        executor = world.call(lambda: _executor(tmp_path))
        try:
            seen = []
            for job, command in ((1, py(LEAVES_A_SOCKET)), (2, py("print('hi')"))):
                handle = world.call(lambda j=job, c=command: executor.start(_task(j, c)))
                _wait_exit(executor, handle)
                state = json.loads((executor.attempt_dir(job, 1) / "state.json").read_text())
                assert state["exit_code"] == 0, state
                seen.append(state["network"]["warm"])
                executor.release(handle)
            assert seen[0] != seen[1]
        finally:
            executor.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
def test_hostile_a_namespace_one_account_used_is_never_given_to_another(tmp_path) -> None:  # noqa: ANN001
    """Another team's job (another Unix account) never starts in a namespace a job of
    this account used, even one left empty: it gets a warm one nobody used."""
    from tests.support.unix import system_account

    with system_account() as other, outside_world() as world:
        executor = world.call(lambda: _executor(tmp_path))
        try:
            seen = []
            for job, unix_user in ((1, None), (2, other), (3, None)):
                task = replace(_task(job, py("print('hi')")), unix_user=unix_user)
                handle = world.call(lambda t=task: executor.start(t))
                _wait_exit(executor, handle)
                state = json.loads((executor.attempt_dir(job, 1) / "state.json").read_text())
                assert state["exit_code"] == 0, state
                seen.append(state["network"]["warm"])
                executor.release(handle)
            assert seen[1] not in (seen[0], seen[2]), seen
            assert seen[2] == seen[0], "the first account's namespace waited for its next job"
        finally:
            executor.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
def test_a_warm_namespace_of_a_runner_killed_with_9_is_swept_at_the_next_start(
    tmp_path,  # noqa: ANN001
) -> None:
    from gpupool.runner.warmnet import WARM_DIR

    with outside_world() as world:
        executor = world.call(lambda: _executor(tmp_path))
        try:
            command = py("import time; print('up', flush=True); time.sleep(60)")
            handle = world.call(lambda: executor.start(_task(1, command)))
            attempt = executor.attempt_dir(1, 1)
            wait_for(lambda: "up" in _read(attempt / "output.log"), 30, "the job runs")
            slot = (
                tmp_path
                / "jobs"
                / WARM_DIR
                / json.loads(_read(attempt / "state.json"))["network"]["warm"]
            )
            pasta = int((slot / "pasta.pid").read_text())
            os.kill(handle.state["runner_pid"], 9)
            os.killpg(json.loads(_read(attempt / "state.json"))["pgid"], 9)
        finally:
            executor.close()
        assert psutil.pid_exists(pasta) and not _zombie(pasta), "nothing else stops it"
        again = world.call(lambda: _executor(tmp_path))
        try:
            wait_for(lambda: not psutil.pid_exists(pasta) or _zombie(pasta), 10, "pasta stopped")
            assert not slot.exists()
        finally:
            again.close()


def _executor(root):  # noqa: ANN001, ANN202 - a LocalExecutor as a node's server makes it
    from gpupool.executors.isolation import Isolation
    from gpupool.executors.local import LocalExecutor
    from gpupool.settings import Settings

    settings = Settings(data_dir=root / "data")
    return LocalExecutor(root / "jobs", isolation=Isolation(settings))


def _task(job: int, command: list[str]):  # noqa: ANN202 - a TaskSpec with a network of its own
    from gpupool.executors.task import TaskSpec

    return TaskSpec(job, 1, "local", command, {}, None, [], 1 << 20, 1.0, network="isolated")


def _wait_exit(executor, handle) -> None:  # noqa: ANN001
    from gpupool.executors.task import Observed

    wait_for(lambda: executor.poll(handle).observed == Observed.EXITED, 30, "the job exits")


def _pastas_under(root) -> list[int]:  # noqa: ANN001
    return [int(p.read_text()) for p in root.glob("*/pasta.pid") if p.read_text().strip()]


def _read(path) -> str:  # noqa: ANN001
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of the test's own: root")
@pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing")
def test_warm_namespaces_end_with_their_server_even_when_their_directory_is_gone(
    tmp_path,  # noqa: ANN001
) -> None:
    """A server stopped and its data directory removed at once (as a test's clean-up does):
    the fork server still finds its warm pasta daemons, by the command line."""
    from gpupool.runner.warmnet import WARM_DIR

    with outside_world() as world:
        executor = world.call(lambda: _executor(tmp_path))
        command = py("print('hi')")
        handle = world.call(lambda: executor.start(_task(1, command)))
        _wait_exit(executor, handle)
        warm = tmp_path / "jobs" / WARM_DIR
        waiting = wait_for(lambda: _pastas_under(warm) or None, 10, "warm namespaces")
        shutil.rmtree(tmp_path / "jobs")
        executor.close()
        wait_for(lambda: not any(psutil.pid_exists(p) for p in waiting), 10, "warm pasta ends")
