"""Storage quotas on a pool: a job's outputs stay on the node that ran it, and its node's
agent counts them for the server, so a team cannot get past its quota by writing on a
joined node's disk; another team's job there runs on."""

from __future__ import annotations

import secrets
import sys

import httpx

from tests.support.cli import Cli
from tests.support.pool import Pool
from tests.support.waiting import wait_for

MIB = 1024**2
FINAL = {"succeeded", "failed", "cancelled", "lost"}
# writes 24 MiB into its outputs, then waits to be stopped
FILLER = (
    "import os, time\n"
    "out = os.environ['GPUPOOL_OUTPUT_DIR']\n"
    "for n in range(24):\n"
    "    with open(os.path.join(out, f'part-{n}.bin'), 'wb') as f:\n"
    "        f.write(os.urandom(1 << 20))\n"
    "print('wrote 24 MiB', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.1)\n"
)
CALM = "import time\nprint('calm', flush=True)\ntime.sleep(300)\n"


def test_a_team_past_its_quota_with_files_on_a_joined_node_is_stopped(pool: Pool) -> None:
    suffix = secrets.token_hex(3)
    with _client(pool, pool.server.token) as admin:
        made = admin.post("/teams", json={"name": f"fill-{suffix}", "storage": 10 * MIB})
        assert made.status_code == 201, made.text
        fill, fill_token = _member(pool, admin, f"fill-{suffix}")
        calm, _ = _member(pool, admin, f"calm-{suffix}")
        calm_job = _submit(calm, CALM)
        filler = _submit(fill, FILLER)
        try:
            running = wait_for(lambda: _running(admin, filler), 120, "the filler to run")
            assert running["placement"]["node"] == "n1", running  # a joined node's disk
            ended = wait_for(lambda: _final(admin, filler), 120, "the filler to be stopped")
            assert (ended["status"], ended["reason"]) == ("failed", "StorageQuotaExceeded"), ended
            assert "over its storage quota of 10 MiB" in ended["message"], ended["message"]
            assert _job(admin, calm_job)["status"] == "running", "the other team's job runs on"

            shown = Cli(pool.server.url, fill_token)("team", "show", f"fill-{suffix}")
            assert shown.returncode == 0, shown.stderr
            assert "OVER:" in shown.stdout, shown.stdout
            [seen] = fill.get("/teams").json()
            assert seen["storage"]["used"] > 20 * MIB, seen  # the node's files, not the log
        finally:
            admin.post(f"/jobs/{calm_job}/cancel")
            admin.post(f"/jobs/{filler}/cancel")


def _client(pool: Pool, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=f"{pool.server.url}/api/v1", headers=headers, timeout=30)


def _member(pool: Pool, admin: httpx.Client, team: str) -> tuple[httpx.Client, str]:
    if team not in {t["name"] for t in admin.get("/teams").json()}:
        assert admin.post("/teams", json={"name": team}).status_code == 201
    name = f"{team}-{secrets.token_hex(3)}"
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    token = admin.post("/tokens", json={"user": name, "name": "t"}).json()["token"]
    return _client(pool, token), token


def _submit(client: httpx.Client, program: str) -> int:
    spec = {
        "command": [sys.executable, "-c", program],
        "resources": {"gpus": 1},
        "gpu_types": ["H100"],  # only n1 has them
    }
    answer = client.post("/jobs", json=spec)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _job(client: httpx.Client, job_id: int) -> dict:
    return client.get(f"/jobs/{job_id}").json()


def _running(client: httpx.Client, job_id: int) -> dict | None:
    job = _job(client, job_id)
    assert job["status"] not in FINAL, job
    return job if job["status"] == "running" else None


def _final(client: httpx.Client, job_id: int) -> dict | None:
    job = _job(client, job_id)
    return job if job["status"] in FINAL else None
