"""Time to queue 1,000 tasks as one job array against 1,000 single submits, on a real server.

Both go through the API of a real ``gpupool server`` on 127.0.0.1 (SQLite, then PostgreSQL
where one is found), one keep-alive client, behind a job holding all 8 GPUs so that the
figure is the submit path (validation, auth, the transaction) while the scheduler loop runs
beside it. Each round's jobs are cancelled before the next. Also: one `gpupool run --array`
CLI call, start-up included. Printed: seconds for each, and the ratio single/array.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import client, start_server, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.postgres import PostgresServer  # noqa: E402

TASKS, ROUNDS = 1000, 3
JOB = {"command": ["true"], "resources": {"gpus": 1}}


def array_seconds(api) -> float:  # noqa: ANN001 - an httpx client
    began = time.perf_counter()
    answer = api.post("/jobs", json=JOB | {"array": {"indexes": f"0-{TASKS - 1}%50"}})
    elapsed = time.perf_counter() - began
    if answer.status_code != 201 or len(answer.json()["job_ids"]) != TASKS:
        raise RuntimeError(f"array submit answered {answer.status_code}: {answer.text[:200]}")
    api.post(f"/jobs/arrays/{answer.json()['id']}/cancel")
    return elapsed


def singles_seconds(api) -> float:  # noqa: ANN001
    ids = []
    began = time.perf_counter()
    for _ in range(TASKS):
        answer = api.post("/jobs", json=JOB)
        if answer.status_code != 201:
            raise RuntimeError(f"submit answered {answer.status_code}: {answer.text[:200]}")
        ids.append(answer.json()["id"])
    elapsed = time.perf_counter() - began
    for job_id in ids:
        api.post(f"/jobs/{job_id}/cancel")
    return elapsed


def cli_seconds(server) -> float:  # noqa: ANN001
    env = os.environ | {"GPUPOOL_URL": server.url, "GPUPOOL_TOKEN": server.token}
    command = [sys.executable, "-m", "gpupool", "run", "--gpus", "1", "--array"]
    command += [f"0-{TASKS - 1}%50", "--", "true"]
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - began
    if done.returncode:
        raise RuntimeError(f"gpupool run --array failed: {done.stderr[-300:]}")
    env_cancel = [sys.executable, "-m", "gpupool", "cancel", done.stdout.strip()]
    subprocess.run(env_cancel, env=env, capture_output=True, timeout=120)
    return elapsed


def measure(label: str, env: dict[str, str] | None = None) -> None:
    server = start_server(env)
    try:
        with client(server) as api:
            hold = api.post("/jobs", json={"command": ["sleep", "600"], "resources": {"gpus": 8}})
            hold_id = hold.json()["id"]
            wait_until(lambda: api.get(f"/jobs/{hold_id}").json()["status"] == "running", 60)
            array = statistics.median(array_seconds(api) for _ in range(ROUNDS))
            singles = statistics.median(singles_seconds(api) for _ in range(ROUNDS))
            cli = cli_seconds(server)
            api.post(f"/jobs/{hold_id}/cancel")
        print(
            f"  {label:<11} array {array:6.3f} s   {TASKS} single submits {singles:6.2f} s   "
            f"ratio {singles / array:5.1f}x   (one CLI call, start-up included: {cli:.2f} s)"
        )
    finally:
        server.stop()


def main() -> None:
    print(f"Queueing {TASKS} tasks: one array request against {TASKS} submits (median of {ROUNDS})")
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


if __name__ == "__main__":
    sys.exit(main())
