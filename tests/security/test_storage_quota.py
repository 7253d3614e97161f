"""Storage quotas: a team that writes past its quota has its running jobs stopped
(StorageQuotaExceeded) and the server stores nothing more for it (models, code), while
another team's job runs on; the team sees its usage (`gpupool team show`), another team
neither sees nor sets it."""

from __future__ import annotations

import hashlib
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

MIB = 1024**2
FINAL = {"succeeded", "failed", "cancelled", "lost"}
# writes 50 MiB into its outputs, 1 MiB at a time, then waits to be stopped
FILLER = (
    "import os, time\n"
    "out = os.environ['GPUPOOL_OUTPUT_DIR']\n"
    "for n in range(50):\n"
    "    with open(os.path.join(out, f'part-{n}.bin'), 'wb') as f:\n"
    "        f.write(os.urandom(1 << 20))\n"
    "print('wrote 50 MiB', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.1)\n"
)
# waits for "go" in its outputs (the test writes it), writes 1 MiB, ends well
CALM = (
    "import os, time\n"
    "out = os.environ['GPUPOOL_OUTPUT_DIR']\n"
    "while not os.path.exists(os.path.join(out, 'go')):\n"
    "    time.sleep(0.05)\n"
    "open(os.path.join(out, 'done.bin'), 'wb').write(os.urandom(1 << 20))\n"
)

# writes 2 MiB into its outputs and ends
WRITE_2_MIB = (
    "import os\n"
    "out = os.environ['GPUPOOL_OUTPUT_DIR']\n"
    "open(os.path.join(out, 'two.bin'), 'wb').write(os.urandom(2 << 20))\n"
)


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    """A real server that sums the teams' files every half second."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    base = Path(tempfile.mkdtemp(prefix="gpupool-storage-", dir="/tmp"))
    base.chmod(0o755)
    found = ServerProcess(base / "data", env={"GPUPOOL_STORAGE_SCAN_SECONDS": "0.5"})
    try:
        yield found.start()
    finally:
        found.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_a_team_past_its_storage_quota_is_stopped_refused_and_sees_why(
    server: ServerProcess,
) -> None:
    with _client(server, server.token) as admin:
        made = admin.post("/teams", json={"name": "fill", "storage": 10 * MIB})
        assert made.status_code == 201, made.text
        assert made.json()["storage"]["quota"] == 10 * MIB
        fill, fill_token = _member(server, admin, "fill")
        calm, _ = _member(server, admin, "calm")
        calm_job = _submit(calm, CALM)
        filler = _submit(fill, FILLER)
        wait_for(lambda: _job(admin, calm_job)["status"] == "running", 60, "the calm job")

        ended = wait_for(lambda: _final(admin, filler), 90, "the filler to be stopped")
        assert (ended["status"], ended["reason"]) == ("failed", "StorageQuotaExceeded"), ended
        assert "over its storage quota of 10 MiB" in ended["message"], ended["message"]

        assert _job(admin, calm_job)["status"] == "running", "the other team's job runs on"
        (server.data_dir / "jobs" / str(calm_job) / "outputs" / "go").touch()
        done = wait_for(lambda: _final(admin, calm_job), 60, "the calm job to end")
        assert (done["status"], done["exit_code"]) == ("succeeded", 0), done

        shown = Cli(server.url, fill_token)("team", "show", "fill")
        assert shown.returncode == 0, shown.stderr
        assert "OVER:" in shown.stdout and "of 10 MiB" in shown.stdout, shown.stdout
        [seen] = fill.get("/teams").json()
        assert seen["storage"]["over"] and seen["storage"]["used"] > 10 * MIB, seen

        registered = fill.post("/models/weights/versions", json={"job_id": filler, "path": ""})
        _refused(registered)
        archive = secrets.token_bytes(64)
        ref = "sha256:" + hashlib.sha256(archive).hexdigest()
        _refused(fill.put(f"/code/{ref}", content=archive))
        assert fill.get("/jobs").status_code == 200, "reads answer"


def test_a_team_past_its_storage_quota_submits_no_job_and_gpupool_run_says_why(
    server: ServerProcess,
) -> None:
    with _client(server, server.token) as admin:
        made = admin.post("/teams", json={"name": "full", "storage": MIB})
        assert made.status_code == 201, made.text
        full, full_token = _member(server, admin, "full")
        other, _ = _member(server, admin, "roomy")
        writer = _submit(full, WRITE_2_MIB)
        wait_for(lambda: _final(admin, writer), 60, "the 2 MiB job to end")
        over = wait_for(lambda: full.get("/teams").json()[0]["storage"]["over"], 30, "a scan")
        assert over

        refused = full.post("/jobs", json={"command": ["true"]})
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "storage_quota_exceeded", error
        assert "over its storage quota of 1 MiB" in error["message"], error
        assert "delete outputs" in error["message"] and "ask an admin" in error["message"]
        run = Cli(server.url, full_token)("run", "--", "echo", "never")
        assert run.returncode != 0, run.stdout
        assert "storage_quota_exceeded" in run.stderr, run.stderr
        assert "delete outputs" in " ".join(run.stderr.split()), run.stderr
        assert "Traceback" not in run.stderr
        assert full.get(f"/jobs/{writer}").status_code == 200, "its jobs still read"
        assert other.post("/jobs", json={"command": ["true"]}).status_code == 201


def test_another_teams_member_neither_sees_nor_sets_a_teams_storage(
    server: ServerProcess,
) -> None:
    with _client(server, server.token) as admin:
        made = admin.post("/teams", json={"name": "vision", "storage": 5 * MIB})
        assert made.status_code == 201, made.text
        _, own_token = _member(server, admin, "vision")
        audio, audio_token = _member(server, admin, "audio")

        assert [team["name"] for team in audio.get("/teams").json()] == ["audio"]
        changed = audio.put("/teams/vision/quota", json={"storage": 10**15})
        assert changed.status_code == 403, changed.text
        shown = Cli(server.url, audio_token)("team", "show", "vision")
        assert shown.returncode == 1 and "no team named 'vision'" in shown.stderr, shown
        own = Cli(server.url, own_token)("team", "show", "vision")
        assert own.returncode == 0 and "of 5 MiB" in own.stdout, own
        assert admin.get("/teams").json()[-1]["storage"]["quota"] == 5 * MIB


def _client(server: ServerProcess, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def _member(server: ServerProcess, admin: httpx.Client, team: str) -> tuple[httpx.Client, str]:
    if team not in {t["name"] for t in admin.get("/teams").json()}:
        assert admin.post("/teams", json={"name": team}).status_code == 201
    name = f"{team}-{secrets.token_hex(3)}"
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    token = admin.post("/tokens", json={"user": name, "name": "t"}).json()["token"]
    return _client(server, token), token


def _submit(client: httpx.Client, program: str) -> int:
    answer = client.post("/jobs", json={"command": [sys.executable, "-c", program]})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _job(client: httpx.Client, job_id: int) -> dict:
    return client.get(f"/jobs/{job_id}").json()


def _final(client: httpx.Client, job_id: int) -> dict | None:
    job = _job(client, job_id)
    return job if job["status"] in FINAL else None


def _refused(answer: httpx.Response) -> None:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "storage_quota_exceeded", error
    assert "over its storage quota of 10 MiB" in error["message"], error
