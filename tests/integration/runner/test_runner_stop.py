"""Stopping: SIGTERM to the whole workload group, SIGKILL after the grace, no leftovers."""

from __future__ import annotations

import signal

from runner_harness import RunnerHarness, is_alive, py, wait_for

from gpupool.runner.sandbox import members

SLEEP_READY = "import time; print('ready', flush=True); time.sleep(600)"

TRAPS_SIGTERM = """
import signal, sys, time
def on_term(signum, frame):
    print('got SIGTERM', flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
print('ready', flush=True)
time.sleep(600)
"""

IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('ready', flush=True)
time.sleep(600)
"""

WITH_GRANDCHILD = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
print(f'grandchild={child.pid}', flush=True)
print('ready', flush=True)
if sys.argv[1] == 'wait':
    time.sleep(600)
"""


def start_and_wait_ready(harness: RunnerHarness, command: list[str], **spec: object):
    harness.write_spec(command, **spec)
    proc = harness.spawn()
    harness.wait_for_log("ready\n")
    return proc


def grandchild_pid(harness: RunnerHarness) -> int:
    line = next(x for x in harness.log().splitlines() if x.startswith("grandchild="))
    return int(line.split("=", 1)[1])


def test_sigterm_reaches_the_workload(harness: RunnerHarness) -> None:
    proc = start_and_wait_ready(harness, py(TRAPS_SIGTERM))
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_for_exit(proc) == 0
    state = harness.state()
    assert state["exit_code"] == 7
    assert state["stop_requested"] is True
    assert "got SIGTERM" in harness.log()


def test_default_sigterm_is_143(harness: RunnerHarness) -> None:
    proc = start_and_wait_ready(harness, py(SLEEP_READY))
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_for_exit(proc) == 0
    state = harness.state()
    assert state["exit_code"] == 128 + signal.SIGTERM
    assert state["signal"] == signal.SIGTERM


def test_sigint_also_stops(harness: RunnerHarness) -> None:
    proc = start_and_wait_ready(harness, py(SLEEP_READY))
    proc.send_signal(signal.SIGINT)
    assert harness.wait_for_exit(proc) == 0
    assert harness.state()["exit_code"] == 128 + signal.SIGTERM


def test_ignored_sigterm_is_followed_by_sigkill(harness: RunnerHarness) -> None:
    proc = start_and_wait_ready(harness, py(IGNORES_SIGTERM), stop_grace_seconds=0.5)
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_for_exit(proc) == 0
    state = harness.state()
    assert state["exit_code"] == 128 + signal.SIGKILL
    assert state["signal"] == signal.SIGKILL
    log = harness.log()
    assert "[gpupool] stop requested; sending SIGTERM to the workload (grace 0.5 s)" in log
    assert "[gpupool] grace period over; sending SIGKILL to the workload" in log


def test_stop_json_grace_wins_over_the_spec(harness: RunnerHarness) -> None:
    # With the spec's 600 s grace this would outlast the wait below.
    proc = start_and_wait_ready(harness, py(IGNORES_SIGTERM), stop_grace_seconds=600)
    (harness.dir / "stop.json").write_text('{"grace_seconds": 0.5}')
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_for_exit(proc, timeout=60) == 0
    assert harness.state()["exit_code"] == 128 + signal.SIGKILL


def workload_pids(harness: RunnerHarness) -> list[int]:
    """Host PIDs to watch: the grandchild the workload printed, or, in a sandbox (where a
    job sees only PIDs of its own namespace), every process of the sandbox's namespace."""
    if not harness.sandboxed:
        return [grandchild_pid(harness)]
    state = wait_for(lambda: harness.state().get("sandbox"), what="the sandbox's namespace")
    return members(state["pid_namespace"])


def test_stop_kills_grandchildren(harness: RunnerHarness) -> None:
    proc = start_and_wait_ready(harness, py(WITH_GRANDCHILD) + ["wait"])
    pids = workload_pids(harness)
    assert pids and all(is_alive(pid) for pid in pids)
    assert len(pids) >= (1 if not harness.sandboxed else 3)  # init, workload, grandchild
    proc.send_signal(signal.SIGTERM)
    assert harness.wait_for_exit(proc) == 0
    wait_for(lambda: not any(is_alive(p) for p in pids), what="the grandchild to die")


def test_leftovers_are_killed_when_the_workload_exits(harness: RunnerHarness) -> None:
    harness.write_spec(py(WITH_GRANDCHILD) + ["exit"])
    result = harness.run()
    assert result.returncode == 0
    assert harness.state()["exit_code"] == 0
    if harness.sandboxed:
        namespace = harness.state()["sandbox"]["pid_namespace"]
        wait_for(lambda: not members(namespace), what="the sandbox to be empty")
    else:
        wait_for(lambda: not is_alive(grandchild_pid(harness)), what="the grandchild to die")


def test_stop_before_start_runs_nothing(harness: RunnerHarness) -> None:
    harness.write_spec(py("print('ran', flush=True)"))
    (harness.dir / "stop.json").write_text('{"grace_seconds": 1}')
    assert harness.run().returncode == 0
    state = harness.state()
    assert state["exit_code"] == 128 + signal.SIGTERM
    assert state["pid"] is None
    assert "ran" not in harness.log()
