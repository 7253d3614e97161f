"""`gpupool simulate` as a user runs it: a trace file in, one table out."""

from __future__ import annotations

import contextlib
import json
import os
import pty
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


# -- -o json ---------------------------------------------------------------------------------

GENERIC = "submit,duration,gpus,team\n0,3600,2,a\n0,3600,2,b\n60,1800,1,a\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
    "p0,1000,1024,1,500,,LS,Running,0,100,0\n"
    "p1,1000,1024,2,1000,,BE,Running,10,200,10\n"
    "p2,1000,1024,1,1000,,LS,Running,20,300,20\n"
)
UNTIMED_PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\np1,1000,1024,8,1000\n"
)
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M32\nn1,64000,262144,8,T4\n"


def test_json_has_every_row_with_its_bounds_and_nothing_else_on_stdout(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(GENERIC)
    done = simulate(
        "--trace", f"csv:{trace}", "--cluster", "1x4", "--policy", "default", "--policy", "fifo",
        "-o", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trace"] == {
        "name": "csv:trace.csv",
        "jobs": 3,
        "skipped": 0,
        "teams": ["a", "b"],
    }
    assert report["cluster"] == {"spec": "1x4", "nodes": 1, "gpus": 4}
    assert [row["policy"] for row in report["rows"]] == ["default", "fifo"]
    row = report["rows"][0]
    assert (row["jobs"], row["unscheduled"], row["unscheduled_reasons"]) == (3, 0, {})
    # 5 h of GPU time asked of 4 GPUs from 0 to 60 + 1 h: the bounds follow from the trace
    assert row["bounds"]["min_avg_jct"] == (3600 + 3600 + 1800) / 3
    assert row["bounds"]["offered_load"] == 4.5 * 3600 / (4 * 3600)
    assert row["avg_jct"] >= row["bounds"]["min_avg_jct"]
    assert 0 < row["utilisation"] <= row["bounds"]["max_utilisation"]
    assert "replayed in" in done.stderr, "notes stay on stderr"


def test_json_of_virtual_clusters_has_a_row_per_team_and_policy(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(GENERIC)
    done = simulate("--trace", f"csv:{trace}", "--cluster", "1x4", "--vc", "-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # a asks 2 h + 0.5 h of GPU time, b 2 h: 4 GPUs * 2.5 / 4.5 -> 2, * 2 / 4.5 -> 1
    assert report["virtual_clusters"] == {"a": 2, "b": 1}
    teams = {(row["team"], row["policy"]): row for row in report["teams"]}
    assert set(teams) == {("a", "default"), ("b", "default")}
    assert (teams[("a", "default")]["jobs"], teams[("a", "default")]["guarantee"]) == (2, 2)


def test_json_of_the_fill_experiment(tmp_path: Path) -> None:
    pods, nodes = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    pods.write_text(PODS)
    nodes.write_text(NODES)
    done = simulate(
        "--trace", f"alibaba:{pods}?nodes={nodes}", "--cluster", "trace", "--fragmentation",
        "--policy", "fgd", "-o", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["fill"]
    assert (row["policy"], row["total_gpus"]) == ("fgd", 16)
    # 0.5, 2 and 1 GPUs in turn until 110 % of 16 GPUs are asked: 16 tasks, 18 GPUs, and
    # as nothing ends, at least the 2 GPUs beyond the cluster's fail
    assert row["tasks"] == 16 and row["failed"] >= 1
    assert [level["arrived_share"] for level in row["at_levels"]] == [0.8, 0.9, 1.0, 1.1]
    final = row["final"]
    assert final["arrived_gpus"] == 18 and final["allocated_gpus"] <= 16
    assert final["unallocated_share"] == 1 - final["allocated_gpus"] / 16


# -- refusals --------------------------------------------------------------------------------


def test_an_unknown_team_names_the_teams_the_trace_has(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,60,1,60,ab12\n2017-10-01 00:01:00,60,2,120,cd34\n"
    )
    done = simulate("--trace", f"philly:{trace}?teams=zz99", "--cluster", "1x4")
    assert done.returncode == 2 and done.stdout == ""
    assert "no team zz99" in done.stderr and "ab12, cd34" in done.stderr


def test_a_pod_list_without_times_fills_but_is_not_replayed(tmp_path: Path) -> None:
    pods, nodes = tmp_path / "multigpu.csv", tmp_path / "nodes.csv"
    pods.write_text(UNTIMED_PODS)
    nodes.write_text(NODES)
    spec = f"alibaba:{pods}?nodes={nodes}"
    filled = simulate("--trace", spec, "--cluster", "trace", "--fragmentation", "-o", "json")
    assert filled.returncode == 0, filled.stderr
    (row,) = json.loads(filled.stdout)["fill"]
    assert row["tasks"] > 0 and row["final"]["arrived_gpus"] >= 1.1 * 16

    replayed = simulate("--trace", spec, "--cluster", "trace")
    assert replayed.returncode == 2
    assert "--fragmentation" in replayed.stderr and "Traceback" not in replayed.stderr


# -- progress --------------------------------------------------------------------------------


def test_progress_shows_on_a_terminal_only(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(GENERIC)
    args = ("--trace", f"csv:{trace}", "--cluster", "1x4", "-o", "json")
    piped = simulate(*args)
    assert piped.returncode == 0 and "replaying" not in piped.stderr
    assert "\x1b" not in piped.stderr, "no terminal codes when stderr is not a terminal"

    stdout, terminal = on_a_terminal(*args)
    assert json.loads(stdout) == json.loads(piped.stdout), "stdout is the same report"
    assert "replaying default" in terminal


def on_a_terminal(*args: str) -> tuple[str, str]:
    """Stdout (a pipe) and what a terminal on stderr showed."""
    controller, device = pty.openpty()
    env = os.environ | {"TERM": "xterm-256color", "COLUMNS": "100"}
    command = [sys.executable, "-m", "gpupool", "simulate", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=device, env=env) as process:
        os.close(device)
        shown = bytearray()
        with contextlib.suppress(OSError):  # EIO: the terminal's last writer has gone
            while chunk := os.read(controller, 4096):
                shown += chunk
        stdout = process.stdout.read().decode()
        assert process.wait(timeout=120) == 0, shown.decode(errors="replace")
    os.close(controller)
    return stdout, shown.decode(errors="replace")


# -- tiresias, the baseline ------------------------------------------------------------------


def test_every_policy_is_printed_against_a_baseline(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(GENERIC)
    done = simulate(
        "--trace", f"csv:{trace}", "--cluster", "1x4", "--policy", "all",
        "--baseline", "tiresias",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _, header, *rows = [line for line in done.stdout.splitlines() if line.strip()][:-1]
    assert header.split()[-2:] == ["VS", "TIRESIAS"]
    assert [row.split()[0] for row in rows] == [
        "default", "fifo", "drf", "srtf-oracle", "las", "best-fit", "fgd", "tiresias"
    ]  # fmt: skip
    assert rows[-1].split()[-1] == "1.00"


def test_an_unknown_baseline_is_refused_with_the_known_names(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(GENERIC)
    done = simulate("--trace", f"csv:{trace}", "--cluster", "1x4", "--baseline", "magic")
    assert done.returncode == 2
    assert "--baseline" in done.stderr and "tiresias" in done.stderr


def test_tiresias_on_the_philly_subset_of_its_paper(shared_dir: Path) -> None:
    # the first week of the paper's subset (team 11cb48, October 2017), as the paper ran it:
    # GPU counting, no restart cost; the full month gives 3.92 h (docs/scheduling.md)
    philly = shared_dir / "data" / "traces" / "philly.csv"
    done = simulate(
        "--trace", f"philly:{philly}?teams=11cb48&start=2017-10-01&end=2017-10-08",
        "--cluster", "4x4", "--placement", "count", "--restart-cost", "0",
        "--policy", "default", "--policy", "tiresias", "--baseline", "tiresias", "-o", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["baseline"] == "tiresias"
    default, tiresias = report["rows"]
    assert (default["policy"], tiresias["policy"]) == ("default", "tiresias")
    assert tiresias["unscheduled"] == 0 and tiresias["avg_jct_vs_baseline"] == 1.0
    assert default["avg_jct_vs_baseline"] == default["avg_jct"] / tiresias["avg_jct"]
