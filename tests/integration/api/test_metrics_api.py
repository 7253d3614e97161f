"""Training metrics in-process: a real job logs with gpupool.metrics, the runner forwards,
the server keeps them per attempt; /metrics exports the pool for Prometheus."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from gpupool.services.platform import Platform
from tests.support.platform import make_settings, running_app, submit, wait_for, wait_job

TRAIN = (
    "from gpupool import metrics\n"
    "for step in range(20):\n"
    "    metrics.log(step=step, loss=1.0 / (step + 1), lr=0.1)\n"
    "import os\n"
    "with open(os.environ['GPUPOOL_METRICS_FILE'], 'a') as f:\n"
    '    f.write(\'{"step": -1, "values": {"loss": 1}}\\n\')\n'
    '    f.write(\'{"values": {"bad name!": 1}}\\n\')\n'
)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    settings = make_settings(tmp_path_factory.mktemp("metrics") / "data")
    with running_app(settings) as (client, platform):
        yield client, platform


@pytest.fixture(scope="module")
def trained(app: tuple[TestClient, Platform]) -> dict:
    client, _ = app
    job = submit(client, [sys.executable, "-c", TRAIN])
    assert wait_job(client, job["id"])["status"] == "succeeded"
    return wait_for(lambda: _complete(client, job["id"]), 30, "every point kept", 0.05)


def _complete(client: TestClient, job_id: int) -> dict | None:
    answer = client.get(f"/api/v1/jobs/{job_id}/metrics").json()
    return answer if answer["complete"] else None


def test_the_series_of_each_metric_come_back_per_attempt(trained: dict) -> None:
    by_name = {s["name"]: s for s in trained["series"]}
    assert set(by_name) == {"loss", "lr"}
    loss = by_name["loss"]
    assert loss["attempt"] == 1
    assert loss["steps"] == list(range(20))
    assert loss["values"] == pytest.approx([1.0 / (s + 1) for s in range(20)])
    assert all(b >= a for a, b in zip(loss["times"], loss["times"][1:], strict=False))


def test_bad_lines_are_said_once_in_the_log(
    app: tuple[TestClient, Platform], trained: dict
) -> None:
    client, _ = app
    text = client.get(f"/api/v1/jobs/{trained['job_id']}/logs").json()["text"]
    assert "step -1 is not a non-negative integer" in text
    assert "name 'bad name!': use 1 to 100 characters" in text
    assert "metrics: not kept: lines with a bad name (1); lines with a bad step (1)" in text


def test_live_readers_get_only_what_is_new_and_names_filter(
    app: tuple[TestClient, Platform], trained: dict
) -> None:
    client, _ = app
    job_id = trained["job_id"]
    again = client.get(f"/api/v1/jobs/{job_id}/metrics", params={"after": trained["cursor"]})
    assert again.json()["series"] == [] and again.json()["cursor"] == trained["cursor"]
    part = client.get(f"/api/v1/jobs/{job_id}/metrics", params={"names": "lr", "limit": 5}).json()
    assert [s["name"] for s in part["series"]] == ["lr"] and part["more"]
    assert len(part["series"][0]["values"]) == 5
    summary = client.get(f"/api/v1/jobs/{job_id}/metrics/summary").json()
    assert summary[0] == {"name": "loss", "last": 0.05, "min": 0.05, "max": 1.0, "points": 20}


@pytest.mark.parametrize(
    ("params", "status"),
    [({"names": "no spaces"}, 422), ({"after": -1}, 422), ({"attempt": 0}, 422)],
)
def test_bad_queries_are_refused_with_a_clear_code(
    app: tuple[TestClient, Platform], trained: dict, params: dict, status: int
) -> None:
    client, _ = app
    answer = client.get(f"/api/v1/jobs/{trained['job_id']}/metrics", params=params)
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == "invalid_request"


def test_an_unknown_job_has_no_metrics(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    assert client.get("/api/v1/jobs/999999/metrics").status_code == 404


def test_prometheus_reads_the_pool_at_scrape_time(
    app: tuple[TestClient, Platform], trained: dict
) -> None:
    client, platform = app
    sleeper = submit(
        client, [sys.executable, "-c", "import time; time.sleep(60)"], resources={"gpus": 2}
    )
    wait_job(client, sleeper["id"], {"running"})
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    assert {
        "gpupool_gpus_in_use",
        "gpupool_pending_jobs",
        "gpupool_jobs",
        "gpupool_job_starts",
        "gpupool_job_ends",
        "gpupool_scheduling_cycle_seconds",
    } <= set(families)
    in_use = {s.labels["team"]: s.value for s in families["gpupool_gpus_in_use"].samples}
    assert in_use == {"default": 2.0}
    ends = {s.labels["outcome"]: s.value for s in families["gpupool_job_ends"].samples}
    assert ends.get("succeeded", 0) >= 1
    cycles = [
        s for s in families["gpupool_scheduling_cycle_seconds"].samples if s.name.endswith("_count")
    ]
    assert cycles[0].value >= 1
    client.post(f"/api/v1/jobs/{sleeper['id']}/cancel")


def test_the_registry_is_the_apps_own(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    assert client.app.state.prometheus is not REGISTRY
    assert "gpupool_gpus_in_use" not in {m.name for m in REGISTRY.collect()}


def test_the_scrape_needs_a_token(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
