"""Isolation is never silently weaker: without bubblewrap no job runs and the server says what
to install; turned off explicitly, jobs run and the server says so, at start and on the
cluster page."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for


@pytest.fixture
def start(tmp_path: Path) -> Iterator:
    servers: list[ServerProcess] = []

    def started(**env: str) -> ServerProcess:
        server = ServerProcess(tmp_path / f"data-{len(servers)}", env=env).start()
        servers.append(server)
        return server

    yield started
    for server in servers:
        server.stop()


def cluster_page(server: ServerProcess) -> str:
    """The cluster page, as the admin signed in to the web UI sees it."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/api/v1/session", json={"user": "admin", "password": server.token})
        assert answer.status_code == 200, answer.text
        return client.get("/").text


def api(server: ServerProcess) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def test_without_bubblewrap_no_job_runs_and_the_server_says_what_to_install(start) -> None:  # noqa: ANN001
    server = start(GPUPOOL_BWRAP_PATH="/nonexistent/bwrap")
    output = server.output()
    assert "ERROR jobs cannot be isolated: bubblewrap (bwrap) is not installed" in output
    assert "apt-get install bubblewrap" in output and "GPUPOOL_ISOLATION=off" in output
    with api(server) as client:
        job = client.post("/jobs", json={"command": ["true"]}).json()

        def held() -> dict | None:
            found = client.get(f"/jobs/{job['id']}").json()
            return found if found["reason"] == "IsolationUnavailable" else None

        held_job = wait_for(held, 30, "the job to say why it waits")
        assert held_job["status"] == "pending"
        assert "install bubblewrap" in held_job["message"]
        time.sleep(1.0)
        assert client.get(f"/jobs/{job['id']}").json()["status"] == "pending"
        status = client.get("/isolation").json()
        assert (status["mode"], status["runs_jobs"]) == ("unavailable", False)
    page = cluster_page(server)
    assert 'class="alert" id="isolation"' in page
    assert "bubblewrap (bwrap) is not installed" in page
    shown = Cli(server.url, server.token).ok("nodes")
    assert "isolation (unavailable): jobs cannot be isolated" in shown


def test_isolation_off_runs_jobs_and_says_so_at_start_and_on_the_cluster_page(start) -> None:  # noqa: ANN001
    server = start(GPUPOOL_ISOLATION="off")
    assert "WARNING isolation is OFF (GPUPOOL_ISOLATION=off)" in server.output()
    with api(server) as client:
        # /bin/sh: an unsandboxed job under its own account reaches only what that account
        # may (the server's Python may live in root's home)
        command = ["/bin/sh", "-c", "echo UID=$(id -u)"]
        job = client.post("/jobs", json={"command": command}).json()
        done = wait_for(
            lambda: (j := client.get(f"/jobs/{job['id']}").json())["status"] == "succeeded" and j,
            60,
            "the job to run",
        )
        assert done["exit_code"] == 0
        log = client.get(f"/jobs/{job['id']}/logs").json()["text"]
        if os.geteuid() == 0:  # unsandboxed, yet never as root
            assert "UID=0" not in log and "UID=" in log
        assert client.get("/isolation").json()["mode"] == "off"
    page = cluster_page(server)
    assert 'class="warning" id="isolation"' in page and "isolation is OFF" in page
    assert "isolation (off): isolation is OFF" in Cli(server.url, server.token).ok("nodes")


def test_with_bubblewrap_the_server_says_how_jobs_are_kept_apart(start) -> None:  # noqa: ANN001
    server = start()
    assert "isolation: every job runs in a bubblewrap sandbox" in server.output()
    anonymous = httpx.get(f"{server.url}/api/v1/isolation", timeout=30)
    assert anonymous.status_code == 401, "how jobs are kept apart is for signed-in users"
    assert 'class="isolation" id="isolation"' in cluster_page(server)
