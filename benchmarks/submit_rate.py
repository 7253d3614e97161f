"""API submits per second on SQLite and on PostgreSQL, against a real server.

Jobs are queued behind a job that holds all 8 GPUs, so the figure is the submit path alone
(validation, auth, one transaction) while the scheduler loop runs beside it. The load comes
from worker processes on keep-alive connections with the standard library's http.client,
which costs the shared 2 cores far less than a full-featured client would. Baseline in the
same run: GET /api/v1/health through the same load generator (HTTP and framework cost only).
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from harness import client, start_server, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.postgres import PostgresServer  # noqa: E402

SUBMITS, WORKERS = 3000, 4
JOB = json.dumps({"command": ["true"], "resources": {"gpus": 1}}).encode()


def _worker(url: str, token: str, method: str, path: str, count: int, start) -> None:  # noqa: ANN001
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = JOB if method == "POST" else None
    start.wait()
    for _ in range(count):
        connection.request(method, f"/api/v1{path}", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status >= 300:
            raise SystemExit(f"{method} {path} answered {response.status}")
    connection.close()


def rate(server, method: str, path: str) -> float:  # noqa: ANN001
    context = multiprocessing.get_context("fork")
    start = context.Event()
    share = SUBMITS // WORKERS
    args = (server.url, server.token, method, path, share, start)
    workers = [context.Process(target=_worker, args=args) for _ in range(WORKERS)]
    for worker in workers:
        worker.start()
    began = time.perf_counter()
    start.set()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    if any(worker.exitcode for worker in workers):
        raise RuntimeError("a load worker failed")
    return share * WORKERS / elapsed


def measure(label: str, env: dict[str, str] | None = None) -> None:
    server = start_server(env)
    try:
        with client(server) as api:
            hold = api.post("/jobs", json={"command": ["sleep", "600"], "resources": {"gpus": 8}})
            hold_id = hold.json()["id"]
            wait_until(lambda: api.get(f"/jobs/{hold_id}").json()["status"] == "running", 60)
            health = rate(server, "GET", "/health")
            submits = rate(server, "POST", "/jobs")
            queued = len(api.get("/jobs", params={"status": "pending", "limit": 1000}).json())
            api.post(f"/jobs/{hold_id}/cancel")
        print(
            f"  {label:<11} submits {submits:6.0f}/s   baseline GET /health {health:6.0f}/s   "
            f"ratio {submits / health:.2f}   (queue at the end: {queued}+ pending)"
        )
    finally:
        server.stop()


def main() -> None:
    print(f"API submits per second ({SUBMITS} submits from {WORKERS} client processes)")
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
