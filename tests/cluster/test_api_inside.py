"""A job on a joined node runs on a network of its own and finds the platform's API on its own
loopback, at the server's port, as on one machine: its runner's bridge relays it to the node
agent's API socket, which forwards it to the server."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import httpx

from tests.support.cli import FINAL, wait_for
from tests.support.pool import Pool

CALL = (
    "import sys, urllib.request\n"
    "print('api said', urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())"
)


def test_a_job_on_a_joined_node_reaches_the_api_on_its_own_loopback(pool: Pool) -> None:
    port = urlsplit(pool.server.url).port
    bearer = {"Authorization": f"Bearer {pool.server.token}"}
    with httpx.Client(base_url=f"{pool.server.url}/api/v1", headers=bearer, timeout=30) as api:
        spec = {
            "command": [sys.executable, "-c", CALL, f"http://127.0.0.1:{port}/api/v1/health"],
            "resources": {"gpus": 1},
            "gpu_types": ["H100"],  # only n1 has them
        }
        made = api.post("/jobs", json=spec)
        assert made.status_code == 201, made.text
        job_id = made.json()["id"]
        job = wait_for(
            lambda: (j := api.get(f"/jobs/{job_id}").json())["status"] in FINAL and j,
            120,
            "the job on n1 to end",
        )
        log = api.get(f"/jobs/{job_id}/logs").json().get("text", "")
        assert job["placement"]["node"] == "n1", job
        assert job["status"] == "succeeded", log
        assert "api said {" in log and '"status"' in log, log
