"""A full disk: submits get a clear storage_full error, nothing acknowledged is lost, and
when space returns everything recovers by itself, with the jobs' real exit codes. A team
whose job fills the disk is stopped, while reads and the other teams' work go on."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.runner.sandbox import members
from tests.support.cli import Cli
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

FINAL = {"succeeded", "failed", "cancelled", "lost"}


def job(code: int) -> list[str]:
    """Waits for its release file (outside the small disk), prints, exits with ``code``."""
    program = (
        "import os, sys, time\n"
        "print('waiting', flush=True)\n"
        "while not os.path.exists('release'):\n"
        "    time.sleep(0.05)\n"
        f"print('done {code}', flush=True)\n"
        f"sys.exit({code})\n"
    )
    return [sys.executable, "-c", program]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs for the server's data directory (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m,mode=0755", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no room left."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def test_a_full_disk_refuses_submits_and_recovers_with_real_exit_codes(
    small_disk: Path, tmp_path: Path, exchange: Path
) -> None:
    # no reserve: this is the disk full past what the server keeps for its database
    server = ServerProcess(small_disk / "data", env={"GPUPOOL_DISK_RESERVE_BYTES": "0"})
    server.log_path = tmp_path / "server-output.log"  # the server's own output is elsewhere
    server.start()
    try:
        with httpx.Client(
            base_url=f"{server.url}/api/v1",
            headers={"Authorization": f"Bearer {server.token}"},
            timeout=30,
        ) as client:
            _run(client, server, small_disk, exchange)
    finally:
        server.stop()


# a team's job that writes its outputs until the disk is full, then waits (keeping them)
FILLER = (
    "import os, time\n"
    "out = os.environ['GPUPOOL_OUTPUT_DIR']\n"
    "try:\n"
    "    with open(os.path.join(out, 'fill.bin'), 'wb', buffering=0) as f:\n"
    "        while True:\n"
    "            f.write(b'x' * (1 << 20))\n"
    "except OSError as e:\n"
    "    print('disk full:', e, flush=True)\n"
    "while True:\n"
    "    time.sleep(0.1)\n"
)


def test_a_team_filling_the_disk_is_stopped_and_reads_and_other_teams_go_on(
    small_disk: Path, tmp_path: Path, exchange: Path
) -> None:
    """The server keeps a reserve for its database (a twentieth of this small disk): when a
    team's job fills the disk, the server gives it back, stops that team's jobs
    (StorageQuotaExceeded), and every read and the other team's job go on."""
    reserve = {"GPUPOOL_DISK_RESERVE_BYTES": str(256 * 1024**2)}  # the default (tests: 0)
    server = ServerProcess(
        small_disk / "data", env={"GPUPOOL_STORAGE_SCAN_SECONDS": "0.5", **reserve}
    )
    server.log_path = tmp_path / "server-output.log"
    server.start()
    try:
        assert (server.data_dir / "disk-reserve").stat().st_size > 0, "made at start"
        with _api(server, server.token) as admin:
            fill, calm = _token(admin, "fill"), _token(admin, "calm")
            calm_job = _submit(admin, calm, job(0), exchange)
            wait_for(lambda: _status(admin, calm_job) == "running", 60, "the calm job to run")
            filler = _submit(admin, fill, [sys.executable, "-c", FILLER], exchange)

            ended = wait_for(lambda: _final(admin, filler), 90, "the filler to be stopped")
            assert (ended["status"], ended["reason"]) == ("failed", "StorageQuotaExceeded")
            assert "nearly full" in ended["message"], ended["message"]
            with _api(server, calm) as reader:  # its first use of its token: not cached
                assert reader.get("/jobs").status_code == 200
                assert reader.get("/teams").status_code == 200
            assert admin.get("/jobs", params={"limit": 100}).status_code == 200
            assert _status(admin, calm_job) == "running", "the other team's job runs on"
            (exchange / "release").touch()
            done = wait_for(lambda: _final(admin, calm_job), 60, "the calm job to end")
            assert (done["status"], done["exit_code"]) == ("succeeded", 0), done
    finally:
        server.stop()


def _api(server: ServerProcess, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def _token(admin: httpx.Client, team: str) -> str:
    """A token of a new member of a new ``team``."""
    assert admin.post("/teams", json={"name": team}).status_code == 201
    name = f"{team}-user"
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    return admin.post("/tokens", json={"user": name, "name": "t"}).json()["token"]


def _submit(admin: httpx.Client, token: str, command: list[str], workdir: Path) -> int:
    body = {"command": command, "workdir": str(workdir)}
    headers = {"Authorization": f"Bearer {token}"}
    answer = admin.post("/jobs", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _status(client: httpx.Client, job_id: int) -> str:
    return client.get(f"/jobs/{job_id}").json()["status"]


def _run(client: httpx.Client, server: ServerProcess, disk: Path, exchange: Path) -> None:
    def submit(code: int) -> httpx.Response:
        body = {"command": job(code), "resources": {"gpus": 1}, "workdir": str(exchange)}
        return client.post("/jobs", json=body)

    unseen = client.post("/tokens", json={"name": "unseen"}).json()["token"]  # not used yet
    running = [submit(code).json()["id"] for code in (3, 4, 5, 6)]
    queued = submit(9).json()["id"]  # the 4 GPUs are taken: it waits
    for job_id in running:
        wait_for(lambda j=job_id: client.get(f"/jobs/{j}").json()["status"] == "running", 60)

    filler = fill(disk)
    refused = submit(0)
    assert refused.status_code == 507, refused.text
    assert refused.json()["error"]["code"] == "storage_full"
    assert "disk is full" in refused.json()["error"]["message"]
    cli = Cli(server.url, server.token)("run", "--workdir", str(exchange), "--", "true")
    assert cli.returncode == 1 and "error [storage_full]" in cli.stderr, cli.stderr
    (exchange / "release").touch()  # the jobs end while nothing can be written
    for job_id in running:
        namespace = _sandbox(server, job_id)["pid_namespace"]
        wait_for(lambda ns=namespace: not members(ns), 30, f"job {job_id}'s workload to end")
    time.sleep(1.0)  # a few of the runners' tries to record the exits
    seen = {j["id"]: j for j in client.get("/jobs", params={"limit": 100}).json()}
    assert set(seen) >= {*running, queued}, "reads work while full"
    with _api(server, unseen) as reader:  # a token not seen lately: its last use is not written
        assert reader.get("/jobs").status_code == 200, "a valid token is never refused a read"
    assert all(seen[j]["status"] == "running" for j in running), "no exit could be recorded"

    filler.unlink()
    for job_id, code in zip(running, (3, 4, 5, 6), strict=True):
        ended = wait_for(lambda j=job_id: _final(client, j), 90, f"job {job_id} to end")
        assert (ended["status"], ended["exit_code"]) == ("failed", code), ended
    last = wait_for(lambda: _final(client, queued), 90, "the queued job to run and end")
    assert (last["status"], last["exit_code"]) == ("failed", 9)
    assert submit(0).status_code == 201, "submits are taken again"
    everything = client.get("/jobs", params={"limit": 100}).json()
    assert len(everything) == 6, "nothing acknowledged was lost; the refused one not stored"


def _sandbox(server: ServerProcess, job_id: int) -> dict:
    state = server.data_dir / "jobs" / str(job_id) / "attempts" / "1" / "state.json"
    return json.loads(state.read_text())["sandbox"]


def _final(client: httpx.Client, job_id: int) -> dict | None:
    job = client.get(f"/jobs/{job_id}").json()
    return job if job["status"] in FINAL else None
