"""output.log: stdout and stderr through one pipe, live, and capped."""

from __future__ import annotations

import psutil
from runner_harness import RunnerHarness, py, wait_for

MB = 1 << 20


def test_stdout_and_stderr_both_land_in_the_log(harness: RunnerHarness) -> None:
    code = (
        "import sys\n"
        "print('to stdout', flush=True)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "print('stdout again', flush=True)\n"
    )
    harness.write_spec(py(code))
    assert harness.run().returncode == 0
    assert harness.log().splitlines() == ["to stdout", "to stderr", "stdout again"]


def test_log_is_written_live(harness: RunnerHarness) -> None:
    release = harness.work / "release"
    code = (
        "import os, time\n"
        "print('first line', flush=True)\n"
        f"while not os.path.exists({str(release)!r}):\n"
        "    time.sleep(0.01)\n"
        "print('second line', flush=True)\n"
    )
    harness.write_spec(py(code), workdir=str(harness.work))
    proc = harness.spawn()
    harness.wait_for_log("first line\n")
    assert proc.poll() is None
    assert "second line" not in harness.log()
    release.touch()
    assert harness.wait_for_exit(proc) == 0
    assert harness.log() == "first line\nsecond line\n"


def test_log_cap_bounds_the_file_and_keeps_draining(harness: RunnerHarness) -> None:
    code = (
        "import os\n"
        "chunk = (b'y' * 1023 + b'\\n') * 1024\n"
        "for _ in range(50):\n"
        "    os.write(1, chunk)\n"
        "print('done', flush=True)\n"
    )
    harness.write_spec(py(code), log_limit_bytes=MB)
    result = harness.run()
    assert result.returncode == 0
    assert harness.state()["exit_code"] == 0
    size = (harness.dir / "output.log").stat().st_size
    assert MB <= size < MB + 200
    marker = f"[gpupool] log limit of {MB} bytes reached; further output discarded"
    tail = harness.log()[-200:]
    assert tail.endswith(marker + "\n")
    assert tail.count(marker) == 1
    assert "done" not in tail


def test_runner_notes_start_on_their_own_line(harness: RunnerHarness) -> None:
    harness.write_spec(py("import os; os.write(1, b'x' * 10)"), log_limit_bytes=5)
    assert harness.run().returncode == 0
    marker = "[gpupool] log limit of 5 bytes reached; further output discarded"
    assert harness.log() == f"xxxxx\n{marker}\n"


def test_state_json_while_running_and_after(harness: RunnerHarness) -> None:
    release = harness.work / "release"
    code = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.01)\n"
    harness.write_spec(py(code), workdir=str(harness.work))
    proc = harness.spawn()
    running = wait_for(lambda: (harness.dir / "state.json").exists() and harness.state())
    assert running["runner_pid"] == proc.pid
    assert abs(running["runner_create_time"] - psutil.Process(proc.pid).create_time()) < 1.0
    assert running["pgid"] == running["pid"]
    assert psutil.Process(running["pid"]).ppid() == proc.pid
    assert "exit_code" not in running
    release.touch()
    assert harness.wait_for_exit(proc) == 0
    final = harness.state()
    for key in ("runner_pid", "runner_create_time", "pid", "pgid", "started_at"):
        assert final[key] == running[key]
    assert final["exit_code"] == 0
    assert final["ended_at"] >= final["started_at"]
    assert final["stop_requested"] is False
    assert not list(harness.dir.glob(".*.tmp"))
