"""The platform's proxy in front of a deployment: /serve/NAME/predict against the same replica
called directly, in the same run.

A real server deploys a tiny TorchScript model (written by a job, registered) with one replica
of the built-in server. The baseline is that replica's own address (what the proxy forwards
to, read from the server's database); the measured path is the server's /serve address with an
API token. Each is measured one request after another (latency: p50, p99) and with several
clients at once (requests/s), over kept-alive connections, as a client of a model would.
The aim: p50 through the proxy within 1.2x of direct.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
from harness import FINAL, percentile, start_server, stop_on_sigterm, wait_until

from gpupool.services.endpoints import endpoint_of
from gpupool.settings import Settings
from gpupool.store.db import Database

SEQUENTIAL = 1000
CLIENTS = 8
PER_CLIENT = 250
BODY = {"inputs": [[0.1] * 8]}
WRITE_MODEL = (
    "import os, torch; torch.jit.script(torch.nn.Linear(8, 1))"
    ".save(os.environ['GPUPOOL_OUTPUT_DIR'] + '/model.pt')"
)


def main() -> None:
    stop_on_sigterm()
    server = start_server({"GPUPOOL_DEPLOY_HEALTH_INTERVAL_SECONDS": "0.5"})
    try:
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as api:
            direct = deploy(api, server.data_dir)
            proxied = f"{server.url}/serve/bench/predict"
            base_p50, base_rate = report("direct to the replica", direct, {})
            p50, rate = report("through /serve", proxied, headers)
        print(
            f"through /serve vs direct: p50 {p50 / base_p50:.2f}x (aim <= 1.2x), "
            f"requests/s {rate / base_rate:.2f}x"
        )
    finally:
        server.stop()


def deploy(api: httpx.Client, data_dir) -> str:  # noqa: ANN001 - a Path
    """The replica's own URL, once the deployment answers."""
    python = os.path.normpath(sys.executable)  # no '..': the sandbox shows the venv alone
    job = api.post("/api/v1/jobs", json={"command": [python, "-c", WRITE_MODEL]})
    job_id = job.json()["id"]
    wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] in FINAL, 120)
    registered = api.post("/api/v1/models/bench/versions", json={"job_id": job_id})
    assert registered.status_code == 201, api.get(f"/api/v1/jobs/{job_id}/logs").text
    assert api.post("/api/v1/deployments", json={"model": "bench"}).status_code == 201
    wait_until(lambda: api.get("/api/v1/deployments/bench").json()["ready"] == 1, 120)
    replica_job = api.get("/api/v1/deployments/bench").json()["replica_list"][0]["job_id"]
    database = Database(Settings(data_dir=data_dir).database)
    try:
        with database.reader() as session:
            return f"{endpoint_of(session, replica_job).url}/predict"
    finally:
        database.dispose()


def report(what: str, url: str, headers: dict[str, str]) -> tuple[float, float]:
    """Print the figures of ``url``; return its p50 (ms) and requests/s."""
    with httpx.Client(headers=headers, timeout=60) as client:
        for _ in range(50):  # warm up: connections, the model's first runs
            client.post(url, json=BODY)
        latencies = sequential(lambda: client.post(url, json=BODY))
    rate = concurrent(url, headers)
    ms = [s * 1000 for s in latencies]
    print(
        f"{what:24s} p50 {percentile(ms, 50):6.2f} ms  p99 {percentile(ms, 99):6.2f} ms  "
        f"mean {statistics.fmean(ms):6.2f} ms  ({SEQUENTIAL} one after another)   "
        f"{rate:7.0f} requests/s ({CLIENTS} clients)"
    )
    return percentile(ms, 50), rate


def sequential(call: Callable[[], httpx.Response]) -> list[float]:
    times = []
    for _ in range(SEQUENTIAL):
        began = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - began)
        assert answer.status_code == 200, answer.text
    return times


def concurrent(url: str, headers: dict[str, str]) -> float:
    def one_client(_: int) -> None:
        with httpx.Client(headers=headers, timeout=60) as client:
            for _ in range(PER_CLIENT):
                assert client.post(url, json=BODY).status_code == 200

    began = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one_client, range(CLIENTS)))
    return CLIENTS * PER_CLIENT / (time.perf_counter() - began)


if __name__ == "__main__":
    main()
