"""A deployment's replica placed on a joined node is reached through the server's proxy, at
the same /serve address as on one machine, and finds its model version's files there (sent
to the node with the task, shown read-only)."""

from __future__ import annotations

import sys

import httpx

from tests.support import replica_probe
from tests.support.cli import FINAL, wait_for
from tests.support.pool import Pool

WRITE = 'printf pool-weights > "$GPUPOOL_OUTPUT_DIR/weights.bin"'


def test_a_replica_on_a_joined_node_is_served_through_the_proxy(pool: Pool) -> None:
    bearer = {"Authorization": f"Bearer {pool.server.token}"}
    with httpx.Client(base_url=pool.server.url, headers=bearer, timeout=30) as api:
        job = api.post("/api/v1/jobs", json={"command": ["sh", "-c", WRITE]}).json()["id"]
        wait_for(lambda: api.get(f"/api/v1/jobs/{job}").json()["status"] in FINAL, 60, "job")
        registered = api.post("/api/v1/models/pool-model/versions", json={"job_id": job})
        assert registered.status_code == 201, registered.text
        spec = {
            "name": "on-n1",
            "model": "pool-model",
            "command": [sys.executable, "-c", replica_probe.source()],
            "resources": {"gpus": 1},
            "gpu_types": ["H100"],  # only n1 has them
        }
        made = api.post("/api/v1/deployments", json=spec)
        assert made.status_code == 201, made.text
        try:

            def ready() -> dict | None:
                found = api.get("/api/v1/deployments/on-n1").json()
                return found if found["ready"] == 1 else None

            replica = wait_for(ready, 60, "the replica on n1 to be ready")["replica_list"][0]
            assert replica["node"] == "n1"
            answer = api.get("/serve/on-n1/hello?x=1")
            assert answer.status_code == 200, answer.text
            seen = answer.json()
            assert seen["path"] == "/hello?x=1" and seen["files"] == ["weights.bin"]
            assert "authorization" not in {name.lower() for name, _ in seen["headers"]}
            model = f"{seen['model_dir']}/weights.bin"
            probed = api.post("/serve/on-n1/probe", json={"read": [model], "write": [model]})
            found = probed.json()
            assert found[f"read {model}"] == "read"  # read-only on the node too
            assert found[f"write {model}"].startswith("blocked")
        finally:
            jobs = [
                r["job_id"] for r in api.get("/api/v1/deployments/on-n1").json()["replica_list"]
            ]
            assert api.post("/api/v1/deployments/on-n1/stop").status_code == 200
            for replica_job in jobs:  # its GPU free again for the pool's next test
                wait_for(
                    lambda j=replica_job: api.get(f"/api/v1/jobs/{j}").json()["status"] in FINAL,
                    60,
                    "the replica's job to end",
                )
