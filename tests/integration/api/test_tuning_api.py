"""Self-tuning through the API on a real server of one machine (4 declared A100): the pool's
history exported as the simulator's CSV, replayed against what happened (fidelity), a tuning
queued, run by the tuning watch in a process of its own and adopting a new version of the
settings, and the rollback watch judging that adoption a week later.

The history of days cannot be lived in a test: it is written into the database as the real
scheduler (the simulator) ran it, jobs and attempts as the server records them; the jobs
that run now are real."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services import tuning
from gpupool.services.platform import Platform
from gpupool.sim.engine import simulate
from gpupool.sim.traces import Trace
from gpupool.store.models import AttemptModel, JobModel, TeamModel, UserModel
from tests.support.platform import make_settings, refused, running_app, submit, wait_job
from tests.support.waiting import wait_for
from tests.unit.sim.tuning.builders import medium_heavy

API = "/api/v1/scheduler"
HOUR, DAY = 3600.0, 86400.0


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[TestClient, Platform]]:
    settings = make_settings(tmp_path / "data", tune_workers=1, tuning_scan_seconds=0.5)
    with running_app(settings) as running:
        yield running


def seed(platform: Platform, trace: Trace, origin: float, slower: float = 1.0) -> list[int]:
    """Write ``trace`` as the server's history from ``origin`` on, as the live settings
    schedule it on this pool (the simulator runs the real scheduler); ``slower``: each job
    really took this many times its replayed completion time. The job ids, in trace order."""
    nodes = tuple(node for node in platform.loop.recent_nodes() if node.schedulable)
    result = simulate(trace.jobs, nodes, settings=platform.loop.snapshots.policy, restart_cost=60.0)
    records = {record.job_id: record for record in result.records}
    ids = []
    with platform.db.session() as session:
        team = session.query(TeamModel).filter_by(name="default").one()
        user = session.query(UserModel).filter_by(name="admin").one()
        for one in trace.jobs:
            record = records[one.job_id]
            submitted = origin + record.submit
            ended = submitted + record.jct * slower
            job = JobModel(
                user_id=user.id, team_id=team.id, status="succeeded", priority=0,
                gpus=one.request.gpus or 0.0, submitted_at=submitted,
                started_at=ended - one.duration, ended_at=ended, exit_code=0, attempts=1,
                spec={"command": ["true"], "resources": {"gpus": one.request.gpus, "cpus": 1}},
            )  # fmt: skip
            session.add(job)
            session.flush()
            session.add(
                AttemptModel(
                    job_id=job.id,
                    number=1,
                    node="node-a",
                    placement={},
                    status="succeeded",
                    created_at=ended - one.duration,
                    started_at=ended - one.duration,
                    ended_at=ended,
                    exit_code=0,
                )  # fmt: skip
            )
            ids.append(job.id)
    return ids


def test_the_history_is_exported_as_the_simulators_csv_with_running_jobs_censored(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    done = submit(client, ["sleep", "0.2"], resources={"gpus": 1})
    wait_job(client, done["id"])
    running = submit(client, ["sleep", "60"], resources={"gpus": 2})
    wait_job(client, running["id"], {"running"})
    time.sleep(0.5)

    answer = client.get(f"{API}/trace", params={"since": HOUR})

    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    header, *rows = [line.split(",") for line in answer.text.splitlines()]
    assert header == list(tuning.COLUMNS)
    by_gpus = {row[2]: dict(zip(header, row, strict=True)) for row in rows}
    assert by_gpus["1"]["censored"] == "0" and float(by_gpus["1"]["jct"]) >= 0.2
    assert by_gpus["2"]["censored"] == "1" and by_gpus["2"]["jct"] == ""
    assert float(by_gpus["2"]["duration"]) > 0 and by_gpus["2"]["team"] == "default"
    client.post(f"/api/v1/jobs/{running['id']}/cancel")


def test_a_tuning_adopts_better_settings_and_the_watch_rolls_back_a_week_that_went_worse(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    now = time.time()
    seed(platform, medium_heavy(days=4), now - 4 * DAY)
    fidelity = client.get(f"{API}/fidelity", params={"since": 2 * DAY}).json()
    assert fidelity["trusted"] and fidelity["median_error"] < 0.05, fidelity

    # longer waits for the few longest jobs are accepted here: their JCT is what is bought
    guards = {"p95_wait": 2.0, "worst_team_slowdown": 1.0}
    body = {"window": 4 * DAY, "holdout": 2 * DAY, "trials": 12, "sampler": "grid"}
    body |= {"guards": guards, "apply": True}
    queued = client.post(f"{API}/tunes", json=body)

    assert queued.status_code == 202, queued.text
    assert queued.json()["status"] == "queued"
    path = f"{API}/tunes/{queued.json()['id']}"
    ended = wait_for(
        lambda: (shown := client.get(path).json())["status"] in ("succeeded", "failed") and shown,
        120,
        "the tuning to end",
    )
    assert ended["status"] == "succeeded" and ended["decision"] == "adopt", ended["message"]
    assert ended["adopted_version"] == 1
    report = ended["report"]
    assert len(report["trials"]) >= 12 and report["rescored"]
    config = client.get(f"{API}/config").json()
    assert config["version"] == 1 and config["live"]["source"] == "tune"
    assert config["knobs"]["las_thresholds"][0] > 0.9 * HOUR, "medium jobs end before demotion"
    assert config["live"]["prediction"]["tune"] == queued.json()["id"]
    assert platform.loop.snapshots.policy.las_thresholds[0] > 0.9 * HOUR
    assert [t["id"] for t in client.get(f"{API}/tunes").json()] == [queued.json()["id"]]

    # the week after: the pool's jobs really took twice what the replay says they would
    adopted_at = config["live"]["created_at"]
    seed(platform, medium_heavy(days=2, seed=7), adopted_at + 60, slower=2.0)
    later = adopted_at + 8 * DAY
    assert tuning.check_adoptions(platform, later) == [queued.json()["id"]]

    checked = client.get(path).json()["checked"]
    assert checked["verdict"].startswith("rolled back"), checked
    assert checked["real_avg_jct"] > 1.5 * checked["replayed_avg_jct"]
    config = client.get(f"{API}/config").json()
    assert (config["version"], config["live"]["source"]) == (2, "watch")
    assert config["knobs"] == config["environment"], "back to what version 0 was"
    assert tuning.check_adoptions(platform, later) == [], "judged once"


def test_a_dry_run_reports_without_changing_the_settings(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    seed(platform, medium_heavy(days=2, seed=3), time.time() - 2 * DAY)
    body = {"window": 2 * DAY, "holdout": DAY, "trials": 4, "sampler": "grid"}
    tune_id = client.post(f"{API}/tunes", json=body).json()["id"]
    ended = wait_for(
        lambda: (s := client.get(f"{API}/tunes/{tune_id}").json())["status"] == "succeeded" and s,
        120,
        "the dry run to end",
    )
    assert ended["decision"] in ("adopt", "keep") and ended["adopted_version"] is None
    assert client.get(f"{API}/config").json()["version"] == 0


def test_an_empty_history_is_refused_with_why_and_bad_options_are_422(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    tune_id = client.post(f"{API}/tunes", json={"window": DAY, "holdout": HOUR}).json()["id"]
    ended = wait_for(
        lambda: (s := client.get(f"{API}/tunes/{tune_id}").json())["status"] == "succeeded" and s,
        30,
        "the tuning to end",
    )
    assert ended["decision"] == "refuse" and "no history" in ended["message"]
    error = refused(
        client.post(f"{API}/tunes", json={"window": DAY, "holdout": DAY}), 422, "invalid_request"
    )
    assert "shorter than the window" in error["message"]
    refused(client.post(f"{API}/tunes", json={"guards": {"wait": 0.1}}), 422, "invalid_request")
    refused(client.post(f"{API}/tunes", json={"trials": 0}), 422, "invalid_request")
    refused(client.get(f"{API}/tunes/999"), 404, "not_found")
    nothing = client.get(f"{API}/fidelity", params={"since": HOUR}).json()
    assert (nothing["jobs"], nothing["median_error"], nothing["trusted"]) == (0, None, False)


def test_the_nightly_autotune_is_due_once_within_its_hour(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", autotune="nightly", autotune_hour=3)
    with running_app(settings) as (_client, platform):
        local = time.localtime()
        three = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 3, 0, 0, 0, 0, -1))
        assert not tuning.autotune_due(platform, three - 60)
        assert tuning.autotune_due(platform, three + 600)
        tuning.queue_autotune(platform, three + 600)
        assert not tuning.autotune_due(platform, three + 1200), "once a night"
        assert not tuning.autotune_due(platform, three + 2 * HOUR)
        assert tuning.autotune_due(platform, three + DAY + 60), "the next night again"
        shown = tuning.list_tunes(platform)[0]
        assert (shown.source, shown.options["apply"]) == ("autotune", True)
