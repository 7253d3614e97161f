"""A job that listens, placed on a joined node, is given a port on that node (by the node's
agent, bound to the address the pool has for the node), and ``endpoint_of`` on the server
finds it there: the workload answers at that address and port."""

from __future__ import annotations

import httpx

from gpupool.services.endpoints import endpoint_of
from gpupool.settings import Settings
from gpupool.store.db import Database
from tests.support.cli import Cli, wait_for, wait_status
from tests.support.pool import Pool
from tests.support.proxying import echo_command


def test_a_listening_job_on_a_joined_node_serves_where_endpoint_of_says(
    pool: Pool, pool_cli: Cli
) -> None:
    bearer = {"Authorization": f"Bearer {pool.server.token}"}
    spec = {
        "command": echo_command(),
        "listen": True,
        "resources": {"gpus": 1},
        "gpu_types": ["H100"],  # only n1 has them
    }
    answer = httpx.post(f"{pool.server.url}/api/v1/jobs", json=spec, headers=bearer, timeout=30)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    try:
        job = wait_status(pool_cli, job_id, {"running", "failed", "succeeded"})
        assert job["status"] == "running" and job["placement"]["node"] == "n1", job
        database = Database(Settings(data_dir=pool.server.data_dir).database)
        try:
            with database.reader() as session:
                found = endpoint_of(session, job_id)
        finally:
            database.dispose()
        assert found is not None and found.host == "127.0.0.1"  # n1's address on loopback

        def said() -> dict | None:
            try:
                return httpx.get(f"{found.url}/hello", timeout=5).json()
            except httpx.HTTPError:
                return None

        answered = wait_for(said, what="the job on n1 to answer")
        assert answered["port"] == str(found.port)
    finally:
        pool_cli.ok("cancel", str(job_id))
        wait_status(pool_cli, job_id, {"cancelled", "failed", "succeeded", "lost"})
