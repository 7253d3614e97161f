"""Estimated starts through the API when the running jobs have run longer than anything their
users and teams ever ran: the start is unknown, and ``why`` says so instead of "in 1 min".

A real platform in-process (real database, real processes). The test waits for a condition
(the running job has outrun the finished one), never for an amount of time."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services.core import OUTRUN
from gpupool.services.platform import Platform
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.waiting import wait_for

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[TestClient, Platform]]:
    """4 declared A100s on one node."""
    with running_app(make_settings(tmp_path / "data")) as (client, platform):
        yield client, platform


def why(client: TestClient, job_id: int) -> dict:
    answer = client.get(f"/api/v1/jobs/{job_id}/why")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_job_waiting_only_for_jobs_that_outran_their_estimates_has_no_eta(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    finished = submit(client, ["true"], resources={"gpus": 1})  # the user's history: a short job
    assert wait_job(client, finished["id"])["status"] == "succeeded"
    holder = submit(client, SLEEP, resources={"gpus": 4})  # no max runtime: its end is a guess
    wait_job(client, holder["id"], {"running"})
    waiting = submit(client, ["true"], resources={"gpus": 1})

    def unknown() -> dict | None:
        answer = why(client, waiting["id"])
        return answer if answer["position"] and answer["eta_unknown"] == OUTRUN else None

    answer = wait_for(unknown, 60.0, "the estimate to say the holder outran its estimate", 0.2)
    assert answer["status"] == "pending" and answer["eta"] is None
    assert answer["eta_unknown"].startswith("the running jobs have all outrun their estimates")
    assert any("outrun them all" in line for line in answer["estimate"]["assumes"])
    client.post(f"/api/v1/jobs/{holder['id']}/cancel")
