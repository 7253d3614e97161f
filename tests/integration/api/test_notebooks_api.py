"""Notebooks through the API, in process, on a platform whose jobs never start: what a
start records, stop and resume, a notebook whose job ended by itself, what is refused.
(A real JupyterLab: tests/acceptance/test_browser_notebooks.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import gpupool.services.notebooks._notebooks as notebooks
from gpupool.executors.fake import NeverStartsExecutor
from gpupool.services.platform import Platform
from gpupool.store.models import JobModel, NotebookModel
from tests.support.platform import make_settings, refused, running_app
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    base = tmp_path_factory.mktemp("notebooks")
    executor = NeverStartsExecutor(base / "never")
    with running_app(make_settings(base / "data"), executor) as found:
        yield found


def _start(client: TestClient, **body: object) -> dict:
    answer = client.post("/api/v1/notebooks", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _stopped(notebook: dict) -> dict | None:
    return notebook if notebook["state"] == "stopped" else None


def test_a_start_queues_a_notebook_job_that_runs_jupyterlab_in_the_workspace(app) -> None:  # noqa: ANN001
    client, platform = app
    made = _start(client, name="explore", resources={"gpus": 0.5})
    assert made["state"] == "pending" and made["url"] == f"/notebooks/{made['id']}/lab"
    job = client.get(f"/api/v1/jobs/{made['job_id']}").json()
    spec = job["spec"]
    assert job["kind"] == "notebook" and job["name"] == "explore"
    assert spec["listen"] and spec["workspace"] and not spec["preemptible"]
    assert spec["resources"]["gpus"] == 0.5
    assert f"--ServerApp.base_url=/notebooks/{made['id']}/" in spec["command"]
    assert "JUPYTER_TOKEN" not in spec["env"] and "token" not in str(made)
    with platform.db.reader() as session:
        assert len(session.get(NotebookModel, made["id"]).token) >= 40


def test_stop_then_resume_starts_a_new_job_with_a_new_token(app) -> None:  # noqa: ANN001
    client, platform = app
    made = _start(client)
    refused(client.post(f"/api/v1/notebooks/{made['id']}/resume"), 409, "notebook_active")
    client.post(f"/api/v1/notebooks/{made['id']}/stop").raise_for_status()
    # the loop may have placed its job already (a launch that never starts): then the stop
    # ends it a moment later, and the notebook is "stopping" until then
    stopped = wait_for(
        lambda: _stopped(client.get(f"/api/v1/notebooks/{made['id']}").json()), what="stopped"
    )
    assert stopped["stop_reason"] == "StoppedByUser"
    assert stopped["message"].startswith("stopped by admin")
    job = client.get(f"/api/v1/jobs/{made['job_id']}").json()
    assert job["status"] == "cancelled"
    events = client.get(f"/api/v1/jobs/{made['job_id']}/events").json()
    assert "NotebookStopped" in [e["reason"] for e in events]
    resumed = client.post(f"/api/v1/notebooks/{made['id']}/resume").json()
    assert resumed["state"] == "pending" and resumed["job_id"] != made["job_id"]
    assert resumed["message"] == "waiting for the scheduler" and resumed["stop_reason"] is None
    with platform.db.reader() as session:
        assert session.get(NotebookModel, made["id"]).token is not None


def test_a_notebook_whose_job_ended_by_itself_is_stopped_with_its_message(app) -> None:  # noqa: ANN001
    client, platform = app
    made = _start(client)
    now = platform.clock.now()
    with platform.db.session() as session:
        job = session.get(JobModel, made["job_id"])
        job.status, job.ended_at, job.message = "failed", now, "exit code 1"
    assert client.get(f"/api/v1/notebooks/{made['id']}").json()["state"] == "stopped"
    with platform.db.session() as session:
        assert notebooks.settle(session, now) == 1
    shown = client.get(f"/api/v1/notebooks/{made['id']}").json()
    assert shown["stop_reason"] == "JobEnded"
    assert shown["message"].startswith("its job failed: exit code 1; resume")


def test_what_cannot_be_started_is_refused_with_a_code(app) -> None:  # noqa: ANN001
    client, _ = app
    refused(client.post("/api/v1/notebooks", json={"gpu": 1}), 422, "invalid_request")
    bad = client.post("/api/v1/notebooks", json={"resources": {"gpus": 64}})
    refused(bad, 422, "unsatisfiable")
    refused(client.get("/api/v1/notebooks/99999"), 404, "not_found")
    refused(client.get("/notebooks/99999/lab"), 404, "not_found")
    page = client.get("/notebooks/99999", follow_redirects=False)  # a page: signed in by cookie
    assert page.status_code == 303 and page.headers["location"].startswith("/login")


def test_a_page_of_a_notebook_that_does_not_serve_says_why(app) -> None:  # noqa: ANN001
    client, _ = app
    made = _start(client)
    page = client.get(f"/notebooks/{made['id']}/lab", headers={"Accept": "text/html"})
    # queued, or claimed already (its executor never starts it): either way it waits
    assert page.status_code == 200
    assert "is pending" in page.text or "is starting" in page.text, page.text
    assert page.headers["refresh"] == "3"
    api = client.get(f"/notebooks/{made['id']}/api/kernels")
    refused(api, 503, "notebook_not_running")
