"""Reclaim, end to end with real processes: a team that lent its guaranteed GPUs gets them
back by preemption, and only as many as it needs.

Team A is guaranteed 4 of the node's 8 GPUs; team B has no guarantee and fills all 8 with
preemptible jobs. When A submits four 1-GPU jobs, exactly four of B's jobs get SIGTERM, go
back to the queue with a Preempted event naming the A job they yield to, and A's jobs run.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, running_app, submit
from tests.support.waiting import wait_for

GPUS = "8xA100-SXM4-80GB:80GiB"
TIMEOUT = 120.0

# Traps SIGTERM (writes term-JOB-ATTEMPT, exits 143), says it runs, then sleeps.
WORKLOAD = """
import os, pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
tag = f"{os.environ['GPUPOOL_JOB_ID']}-{os.environ['GPUPOOL_ATTEMPT']}"
def stop(signum, frame):
    (out / f"term-{tag}").write_text("TERM")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
(out / f"running-{tag}").write_text("")
time.sleep(600)
"""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(tmp_path / "data", declared_gpus=GPUS)
    with running_app(settings) as (client, _platform):
        for team in ({"name": "a", "guarantee": {"*": 4}}, {"name": "b"}):
            created = client.post("/api/v1/teams", json=team)
            assert created.status_code == 201, created.text
        yield client


def test_a_team_reclaims_its_guarantee_by_preempting_exactly_what_it_needs(
    client: TestClient, exchange: Path
) -> None:
    borrowers = [_submit(client, exchange, "b") for _ in range(8)]
    wait_for(lambda: _all_running(client, exchange, borrowers), TIMEOUT, "B's 8 jobs to run")

    owners = [_submit(client, exchange, "a") for _ in range(4)]
    wait_for(lambda: _all_running(client, exchange, owners), TIMEOUT, "A's 4 jobs to run")

    stopped = sorted(int(m[1]) for m in _matches(exchange, r"term-(\d+)-1"))
    assert len(stopped) == 4 and set(stopped) <= set(borrowers)
    for job_id in stopped:
        job = client.get(f"/api/v1/jobs/{job_id}").json()
        assert job["status"] == "pending" and job["preemptions"] == 1
        preempted = [e for e in job["events"] if e["reason"] == "Preempted"]
        assert len(preempted) == 1
        message = preempted[0]["message"]
        assert message.startswith("preempted for a job of team a:"), message
        assert not re.search(r"job \d", message), "team b is not told which of a's jobs"
    still = [j for j in borrowers if j not in stopped]
    assert all(_status(client, j) == "running" for j in still)


def _submit(client: TestClient, out: Path, team: str) -> int:
    command = [sys.executable, "-c", WORKLOAD, str(out)]
    fields = {"team": team, "resources": {"gpus": 1}, "grace_period_seconds": 2}
    return submit(client, command, preemptible=True, workdir=str(out), **fields)["id"]


def _all_running(client: TestClient, out: Path, job_ids: list[int]) -> bool:
    """Every job runs and its workload has trapped SIGTERM (it wrote its running file)."""
    started = {int(m[1]) for m in _matches(out, r"running-(\d+)-\d+")}
    return set(job_ids) <= started and all(_status(client, j) == "running" for j in job_ids)


def _status(client: TestClient, job_id: int) -> str:
    return client.get(f"/api/v1/jobs/{job_id}").json()["status"]


def _matches(out: Path, pattern: str) -> list[re.Match[str]]:
    found = (re.fullmatch(pattern, path.name) for path in out.iterdir())
    return [match for match in found if match]
