"""An experiment on the Ray pool: its trials are jobs placed on the pool's nodes, they log
their objective from there, and the server's experiments pipeline judges them and names the
best one, as on one machine."""

from __future__ import annotations

import sys

import httpx

from tests.support.cli import wait_for
from tests.support.pool import Pool

TRIAL = (
    "import json, os, socket; from gpupool import metrics; "
    "x = json.loads(os.environ['GPUPOOL_PARAMS'])['x']; "
    "[metrics.log(step=s, error=abs(x - 2) + 1 / s) for s in (1, 2, 3)]"
)


def test_an_experiments_trials_run_on_the_pools_nodes(pool: Pool) -> None:
    headers = {"Authorization": f"Bearer {pool.server.token}"}
    api = f"{pool.server.url}/api/v1"
    body = {
        "name": "pool-search",
        "objective": {"metric": "error"},
        "parameters": {"x": {"type": "int", "low": 0, "high": 3}},
        "sampler": {"name": "grid"},
        "max_trials": 4,
        "max_concurrent": 4,
        "trial": {"command": [sys.executable, "-c", TRIAL], "resources": {"cpus": 0.5}},
    }
    made = httpx.post(f"{api}/experiments", json=body, headers=headers)
    assert made.status_code == 201, made.text
    ref = str(made.json()["id"])

    def ended() -> dict | None:
        shown = httpx.get(f"{api}/experiments/{ref}", headers=headers).json()
        return shown if shown["status"] not in ("running", "paused") else None

    shown = wait_for(ended, what="the experiment on the pool to end", timeout=240)
    assert shown["status"] == "succeeded", shown["message"]
    trials = shown["trial_list"]
    assert sorted(t["params"]["x"] for t in trials) == [0, 1, 2, 3]
    assert {t["state"] for t in trials} == {"completed"}
    assert shown["best"]["params"] == {"x": 2}
    jobs = [httpx.get(f"{api}/jobs/{t['job_id']}", headers=headers).json() for t in trials]
    assert all(job["kind"] == "trial" and job["placement"]["node"] for job in jobs)
