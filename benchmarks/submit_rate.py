"""API submits per second on SQLite and on PostgreSQL, against a real server.

Jobs are queued behind a job that holds all 8 GPUs, so the figure is the submit path alone
(validation, auth, one transaction) while the scheduler loop runs beside it. Baseline in the
same run: GET /api/v1/health on the same server and client (HTTP and framework cost only).
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import client, start_server, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.postgres import PostgresServer  # noqa: E402

SUBMITS, THREADS = 2000, 8


def rate(server, method: str, path: str, body: dict | None) -> float:  # noqa: ANN001
    clients = [client(server) for _ in range(THREADS)]

    def work(index: int) -> None:
        api = clients[index % THREADS]
        response = api.request(method, path, json=body)
        assert response.status_code < 300, response.text

    start = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(work, range(SUBMITS)))
    elapsed = time.perf_counter() - start
    for api in clients:
        api.close()
    return SUBMITS / elapsed


def measure(label: str, env: dict[str, str] | None = None) -> None:
    server = start_server(env)
    try:
        with client(server) as api:
            hold = api.post(
                "/jobs", json={"command": ["sleep", "600"], "resources": {"gpus": 8}}
            ).json()
            wait_until(lambda: api.get(f"/jobs/{hold['id']}").json()["status"] == "running", 60)
            health = rate(server, "GET", "/health", None)
            submits = rate(server, "POST", "/jobs", {"command": ["true"], "resources": {"gpus": 1}})
            api.post(f"/jobs/{hold['id']}/cancel")
        print(
            f"  {label:<11} submits {submits:7.0f}/s   baseline GET /health {health:7.0f}/s   "
            f"ratio {submits / health:.2f}"
        )
    finally:
        server.stop()


def main() -> None:
    print(f"API submits per second ({SUBMITS} submits from {THREADS} client threads, 1 server)")
    measure("SQLite")
    postgres = PostgresServer.find()
    if postgres is None:
        print(f"  PostgreSQL  skipped: {PostgresServer.missing_reason()}")
        return
    postgres.start()
    try:
        measure("PostgreSQL", {"GPUPOOL_DATABASE_URL": postgres.new_database()})
    finally:
        postgres.stop()
    print("  reference (Slurm 22.05 sbatch, same kind of machine): 60-100 submissions/s")


if __name__ == "__main__":
    sys.exit(main())
