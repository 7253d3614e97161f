"""GET /api/v1/health, public: the server answers; in Ray mode, also whether its Ray cluster
does, and nothing more to anonymous callers (the details are for signed-in users)."""

from __future__ import annotations

from pathlib import Path

import gpupool
from tests.support.platform import make_settings, running_app, submit
from tests.support.server import free_port

ANONYMOUS = {"Authorization": ""}


def test_one_machine_says_nothing_of_a_cluster(tmp_path: Path) -> None:
    with running_app(make_settings(tmp_path / "data")) as (client, _platform):
        answer = client.get("/api/v1/health", headers=ANONYMOUS)
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok", "version": gpupool.__version__}


def test_a_pool_whose_head_does_not_answer_is_unreachable_and_queues_jobs(
    tmp_path: Path,
) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = make_settings(tmp_path / "data", ray_address=address)
    with running_app(settings) as (client, _platform):
        health = client.get("/api/v1/health", headers=ANONYMOUS)
        details = client.get("/api/v1/cluster").json()
        job = submit(client, ["true"], resources={"gpus": 1})
        shown = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert health.json() == {
        "status": "ok",
        "version": gpupool.__version__,
        "cluster": "unreachable",
    }
    assert details["reachable"] is False
    assert details["problem"] == (
        f"the Ray cluster at {address} is unreachable: its port does not accept connections"
    )
    assert details["unreachable_since"] is not None
    assert shown["status"] == "pending"
