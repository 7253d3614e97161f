"""Exit records: the workload's code, 128+N for signal N, 126/127 when it cannot run."""

from __future__ import annotations

import signal

import pytest
from runner_harness import RunnerHarness, py


@pytest.mark.parametrize("code", [0, 3])
def test_workload_exit_code_is_recorded(harness: RunnerHarness, code: int) -> None:
    harness.write_spec(py(f"raise SystemExit({code})"))
    result = harness.run()
    assert result.returncode == 0  # the runner's own code: it recorded the exit
    state = harness.state()
    assert state["exit_code"] == code
    assert "signal" not in state


def test_killed_by_signal_is_128_plus_n(harness: RunnerHarness) -> None:
    harness.write_spec(py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert harness.run().returncode == 0
    state = harness.state()
    assert state["exit_code"] == 128 + signal.SIGKILL
    assert state["signal"] == signal.SIGKILL


@pytest.mark.parametrize("command", ["/nonexistent/gpupool-command", "gpupool-no-such-command"])
def test_missing_command_is_127(harness: RunnerHarness, command: str) -> None:
    harness.write_spec([command, "--flag"])
    assert harness.run().returncode == 0
    state = harness.state()
    assert state["exit_code"] == 127
    assert state["pid"] is None
    assert f"[gpupool] command not found: {command}" in harness.log()


def test_not_executable_is_126(harness: RunnerHarness) -> None:
    script = harness.work / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    harness.write_spec([str(script)], workdir=str(harness.work))
    assert harness.run().returncode == 0
    assert harness.state()["exit_code"] == 126
    assert f"[gpupool] command is not executable: {script}" in harness.log()


def test_missing_workdir_is_127_with_a_clear_line(harness: RunnerHarness) -> None:
    missing = harness.work / "no" / "such" / "dir"
    harness.write_spec(py("print('should not run')"), workdir=str(missing))
    assert harness.run().returncode == 0
    assert harness.state()["exit_code"] == 127
    log = harness.log()
    assert f"[gpupool] working directory {missing} does not exist" in log
    assert "should not run" not in log


def test_invalid_spec_is_recorded_not_crashed(harness: RunnerHarness) -> None:
    harness.write_spec([])  # an empty command
    assert harness.run().returncode == 0
    assert harness.state()["exit_code"] == 125
    assert "invalid attempt spec" in harness.log()
