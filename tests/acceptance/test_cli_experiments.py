"""Experiments through the real CLI against a real server: `gpupool apply -f` of a kind
Experiment starts a search whose trials are jobs; `gpupool experiment ls / show / best /
pause / resume / stop` follow and steer it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.cli import Cli, wait_for

TRIAL = (
    "import json, os; from gpupool import metrics; "
    "x = json.loads(os.environ['GPUPOOL_PARAMS'])['x']; "
    "[metrics.log(step=s, error=(x - 3) ** 2 + 1 / s) for s in (1, 2, 3)]"
)


def experiment_file(tmp_path: Path, name: str, trials: int, command: list[str]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        "apiVersion: gpupool/v1\n"
        "kind: Experiment\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        "  objective: {metric: error, direction: minimize}\n"
        "  parameters:\n"
        "    x: {type: int, low: 1, high: 5}\n"
        "  sampler: {name: grid}\n"
        f"  max_trials: {trials}\n"
        "  max_concurrent: 2\n"
        "  trial:\n"
        f"    command: {json.dumps(command)}\n"
        "    resources: {cpus: 0.5}\n"
    )
    return path


def shown(admin: Cli, ref: str) -> dict:
    return admin.json("experiment", "show", ref)


def test_a_grid_search_from_a_job_file_runs_and_names_its_best(admin: Cli, tmp_path: Path) -> None:
    path = experiment_file(tmp_path, "grid", 10, [sys.executable, "-c", TRIAL])
    applied = admin("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    done = wait_for(
        lambda: (found := shown(admin, "grid"))["status"] == "succeeded" and found,
        what="the grid search to end",
        timeout=120,
    )
    assert sorted(t["params"]["x"] for t in done["trial_list"]) == [1, 2, 3, 4, 5]  # 5 points
    assert done["best"]["params"] == {"x": 3}
    best = admin("experiment", "best", "grid")
    assert best.returncode == 0 and "x=3" in best.stdout, best.stdout
    listed = admin("experiment", "ls")
    assert "grid" in listed.stdout and "succeeded" in listed.stdout
    table = admin("experiment", "show", "grid")
    assert "completed" in table.stdout and "best: " in table.stdout


def test_pause_resume_and_stop_from_the_cli(admin: Cli, tmp_path: Path) -> None:
    path = experiment_file(tmp_path, "steer", 5, ["sleep", "60"])
    assert admin("apply", "-f", str(path)).returncode == 0
    paused = admin("experiment", "pause", "steer")
    assert paused.returncode == 0 and "paused" in paused.stdout
    assert "running" in admin("experiment", "resume", "steer").stdout
    stopped = admin("experiment", "stop", "steer")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    again = admin("experiment", "stop", "steer")
    assert again.returncode != 0 and "already ended" in again.stderr
    assert {t["state"] for t in shown(admin, "steer")["trial_list"]} <= {"cancelled"}
