"""Experiments in-process: a real search whose trials are real jobs that log their objective
with gpupool.metrics; successive halving stops the worse ones at their rungs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpupool.services.platform import Platform
from gpupool.store.models import JobModel
from tests.support.platform import make_settings, refused, running_app, wait_for

# A trial: its error falls with each epoch, and is lower the nearer x is to 0.3; it checks
# it was told its point, and logs the epoch as the step.
TRIAL = (
    "import json, os, time\n"
    "from gpupool import metrics\n"
    "params = json.loads(os.environ['GPUPOOL_PARAMS'])\n"
    "assert params['x'] == float(os.environ['X'])\n"
    "assert os.environ['GPUPOOL_TRIAL_ID'].isdigit()\n"
    "for epoch in range(1, 10):\n"
    "    metrics.log(step=epoch, error=abs(params['x'] - 0.3) + 1.0 / epoch)\n"
    "    time.sleep(float(os.environ.get('PAUSE', '0.05')))\n"
)


def experiment(name: str = "search", **fields) -> dict:  # noqa: ANN003
    return {
        "name": name,
        "objective": {"metric": "error", "direction": "minimize"},
        "parameters": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "sampler": {"name": "random", "seed": 7},
        "max_trials": 6,
        "max_concurrent": 3,
        "trial": {
            "command": [sys.executable, "-c", TRIAL],
            "env": {"X": "${params.x}"},
            "resources": {"cpus": 0.5},
        },
        **fields,
    }


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    settings = make_settings(tmp_path_factory.mktemp("experiments") / "data")
    with running_app(settings) as (client, platform):
        yield client, platform


def ended(client: TestClient, ref: str, timeout: float = 90.0) -> dict:
    def check() -> dict | None:
        shown = client.get(f"/api/v1/experiments/{ref}").json()
        return shown if shown["status"] not in ("running", "paused") else None

    return wait_for(check, timeout, f"experiment {ref} ends", 0.1)


def test_a_random_search_runs_every_trial_as_a_job_and_finds_the_best(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    made = client.post("/api/v1/experiments", json=experiment())
    assert made.status_code == 201, made.text
    shown = ended(client, str(made.json()["id"]))
    assert shown["status"] == "succeeded" and shown["reason"] == "MaxTrials"
    trials = shown["trial_list"]
    assert [t["number"] for t in trials] == [1, 2, 3, 4, 5, 6]
    assert {t["state"] for t in trials} == {"completed"}
    values = {t["number"]: abs(t["params"]["x"] - 0.3) + 1 / 9 for t in trials}
    for trial in trials:
        assert trial["value"] == pytest.approx(values[trial["number"]])
    assert shown["best"]["trial"] == min(values, key=values.__getitem__)
    job = client.get(f"/api/v1/jobs/{trials[0]['job_id']}").json()
    assert job["kind"] == "trial" and job["status"] == "succeeded"
    assert set(job["spec"]["env"]) == {"X"}  # its point is told to it, not in its spec


def test_the_same_seed_gives_the_same_points(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    made = [
        client.post("/api/v1/experiments", json=experiment(f"seeded-{n}")).json() for n in (1, 2)
    ]
    shown = [ended(client, str(one["id"])) for one in made]
    points = [[t["params"] for t in one["trial_list"]] for one in shown]
    assert points[0] == points[1] and len(points[0]) == 6


def test_asha_stops_the_worse_trials_at_their_rungs(app: tuple[TestClient, Platform]) -> None:
    client, platform = app
    stopping = {"name": "asha", "max_time": 9, "grace": 1, "reduction_factor": 3}
    body = experiment("halving", stopping=stopping, max_trials=9, max_concurrent=9)
    body["trial"]["env"]["PAUSE"] = "0.4"  # 3.6 s a trial: stopped ones stop mid-way
    made = client.post("/api/v1/experiments", json=body).json()
    shown = ended(client, str(made["id"]))
    trials = shown["trial_list"]
    assert {t["state"] for t in trials} <= {"completed", "early_stopped"}
    stopped = [t for t in trials if t["state"] == "early_stopped"]
    assert stopped, trials
    cut = []
    for trial in stopped:
        assert "rank" in trial["message"] and "the top" in trial["message"]
        job = client.get(f"/api/v1/jobs/{trial['job_id']}").json()
        if job["status"] == "cancelled":
            assert job["reason"] == "EarlyStopped" and "rank" in job["message"]
            cut.append(trial)
        else:  # it ended before its verdict could be given: judged all the same
            assert job["status"] == "succeeded"
    assert cut, "no trial was stopped while it ran"
    why = client.get(f"/api/v1/jobs/{cut[0]['job_id']}/why").json()
    assert why["trial"]["experiment"] == "halving" and why["trial"]["state"] == "early_stopped"
    assert why["trial"]["rungs"][-1] == cut[0]["message"]  # the verdict that stopped it
    first_rung = [t for t in trials if t["rung"] is not None]
    assert len(first_rung) == 9  # every trial was judged at rung 0 (epoch 1)
    going_on = {t["job_id"] for t in trials if t["state"] == "completed"}
    with platform.db.reader() as session:  # the scheduler's victims: the worst-ranked first
        standings = dict(
            session.execute(select(JobModel.id, JobModel.standing).where(JobModel.id.in_(going_on)))
            .tuples()
            .all()
        )
    assert standings and all(0 < s <= 1 for s in standings.values()), standings


def test_pause_resume_and_stop(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    body = experiment("steered", max_trials=50, max_concurrent=1)
    body["trial"]["command"] = [sys.executable, "-c", "import time; time.sleep(30)"]
    made = client.post("/api/v1/experiments", json=body).json()
    paused = client.post("/api/v1/experiments/steered/pause").json()
    assert paused["status"] == "paused"
    assert client.post("/api/v1/experiments/steered/resume").json()["status"] == "running"
    wait_for(
        lambda: client.get("/api/v1/experiments/steered").json()["trials"]["running"] or None,
        30,
        "a trial runs",
        0.1,
    )
    stopped = client.post("/api/v1/experiments/steered/stop").json()
    assert stopped["status"] == "stopped"
    shown = client.get(f"/api/v1/experiments/{made['id']}").json()
    assert {t["state"] for t in shown["trial_list"]} == {"cancelled"}
    refused(client.post("/api/v1/experiments/steered/stop"), 409, "conflict")


def test_bad_experiments_are_refused_with_the_field(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    body = experiment("bad")
    body["trial"]["command"] = ["${params.y}"]
    answer = refused(client.post("/api/v1/experiments", json=body), 422, "invalid_request")
    assert "params.y" in json.dumps(answer)
    body = experiment("bad")
    body["trial"]["resources"] = {"gpus": "${params.x}"}  # 0.0 GPUs at the sample point
    refused(client.post("/api/v1/experiments", json=body), 422, "invalid_request")
    body = experiment("bad", stopping={"name": "asha"})
    refused(client.post("/api/v1/experiments", json=body), 422, "invalid_request")
    refused(client.get("/api/v1/experiments/nothing-of-that-name"), 404, "not_found")
