"""`gpupool simulate` as a user runs it: a trace file in, one table out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def simulate(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "gpupool", "simulate", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_a_generic_trace_is_replayed_into_one_table(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("submit,duration,gpus,team\n0,3600,2,a\n0,3600,2,b\n60,1800,1,a\n")
    done = simulate("--trace", f"csv:{trace}", "--cluster", "1x4")
    assert done.returncode == 0, done.stderr
    assert "default" in done.stdout and "bounds:" in done.stdout
    assert "Traceback" not in done.stderr


def test_an_unknown_policy_is_refused_with_the_known_names(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("submit,duration,gpus,team\n0,60,1,a\n")
    done = simulate("--trace", f"csv:{trace}", "--cluster", "1x4", "--policy", "magic")
    assert done.returncode == 2
    assert "default" in done.stderr + done.stdout
