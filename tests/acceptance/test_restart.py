"""kill -9 of the server while jobs run, then a restart: nothing lost, nothing twice, no leak."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

from tests.support.server import ServerProcess

FINAL = {"succeeded", "failed", "cancelled", "lost"}


def job_script(marker: Path, name: str, seconds: float, code: int) -> list[str]:
    """Append one line to the marker (so a second run shows), sleep, print, exit."""
    program = (
        "import sys, time\n"
        f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n"
        f"print({name!r} + ' started', flush=True)\n"
        f"time.sleep({seconds})\n"
        f"print({name!r} + ' done', flush=True)\n"
        f"sys.exit({code})\n"
    )
    return [sys.executable, "-c", program]


def api(server: ServerProcess) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def wait_status(client: httpx.Client, job_id: int, wanted: set[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    job: dict = {}
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["status"] in wanted:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} is {job.get('status')}, not {wanted}")


def test_kill_9_then_restart_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, exchange: Path
) -> None:
    marker = exchange / "runs.txt"
    workdir = str(exchange)  # where the jobs can write the marker
    server = ServerProcess(tmp_path / "data").start()
    try:
        with api(server) as client:
            short = client.post(
                "/jobs",
                json={
                    "command": job_script(marker, "short", 2, 7),
                    "resources": {"gpus": 1},
                    "workdir": workdir,
                },
            ).json()
            long = client.post(
                "/jobs",
                json={
                    "command": job_script(marker, "long", 60, 0),
                    "resources": {"gpus": 1},
                    "workdir": workdir,
                },
            ).json()
            whole = client.post(
                "/jobs",
                json={
                    "command": job_script(marker, "whole", 0, 0),
                    "resources": {"gpus": 4},
                    "workdir": workdir,
                },
            ).json()
            for job in (short, long):
                wait_status(client, job["id"], {"running"})
            assert client.get(f"/jobs/{whole['id']}").json()["status"] == "pending"
        server.kill9()
        time.sleep(3)  # "short" ends while no server is there to see it
        server.start()
        with api(server) as client:
            ended = wait_status(client, short["id"], FINAL)
            assert (ended["status"], ended["exit_code"]) == ("failed", 7)
            log = client.get(f"/jobs/{short['id']}/logs").json()["text"]
            assert "short started" in log and "short done" in log
            assert client.get(f"/jobs/{long['id']}").json()["status"] == "running"
            reasons = [e["reason"] for e in client.get(f"/jobs/{long['id']}").json()["events"]]
            assert "Readopted" in reasons
            client.post(f"/jobs/{long['id']}/cancel")
            assert wait_status(client, long["id"], FINAL)["status"] == "cancelled"
            done = wait_status(client, whole["id"], FINAL)  # needs all 4 GPUs: none leaked
            assert done["status"] == "succeeded"
            assert sorted(marker.read_text().split()) == ["long", "short", "whole"]
            gpus = client.get("/nodes").json()[0]["gpus"]
            assert all(g["used_share"] == 0 and not g["holders"] for g in gpus)
            assert len(client.get("/jobs", params={"status": list(FINAL)}).json()) == 3
    finally:
        server.stop()


def test_acknowledged_submits_survive_kill_9(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        with api(server) as client:
            hold = client.post(
                "/jobs", json={"command": ["sleep", "60"], "resources": {"gpus": 4}}
            ).json()
            wait_status(client, hold["id"], {"running"})
            ids = [
                client.post("/jobs", json={"command": ["true"], "resources": {"gpus": 1}}).json()[
                    "id"
                ]
                for _ in range(50)
            ]
        server.kill9()
        server.start()
        with api(server) as client:
            listed = {j["id"] for j in client.get("/jobs", params={"limit": 1000}).json()}
            assert set(ids) <= listed
            client.post(f"/jobs/{hold['id']}/cancel")
            for job_id in ids:
                assert wait_status(client, job_id, FINAL)["status"] == "succeeded"
    finally:
        server.stop()
