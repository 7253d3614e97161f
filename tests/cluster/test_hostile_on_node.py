"""The security tier's hostile job, run on a joined node of a pool (its own pool: the server's
node ``head`` and ``n1``, users with Unix accounts of their own): every action of
``tests.security.hostile`` fails there as on one machine, and team A's job on the same node
runs on undisturbed."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.security import hostile
from tests.security.conftest import stand_in_devices
from tests.security.test_hostile_job import VICTIM
from tests.support.pool import Pool, need_loopback_namespace
from tests.support.waiting import wait_for

H100 = "4xH100-SXM5-80GB:80GiB"


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[Pool, list[str]]]:
    need_loopback_namespace()
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("users' own Unix accounts need root and bubblewrap (CI has both)")
    devices = stand_in_devices(tmp_path / "dev")
    env = {"GPUPOOL_CREATE_UNIX_USERS": "true", "GPUPOOL_DEVICE_DIR": str(devices)}
    pool = Pool.start(tmp_path / "pool", env=env)
    accounts: list[str] = []
    try:
        pool.join("n1", H100)
        yield pool, accounts
    finally:
        pool.stop()
        for account in accounts:
            subprocess.run(["userdel", account], capture_output=True)


def member(pool: Pool, team: str, accounts: list[str]) -> tuple[str, httpx.Client]:
    admin = client(pool, pool.server.token)
    if team not in {t["name"] for t in admin.get("/teams").json()}:
        assert admin.post("/teams", json={"name": team}).status_code == 201
    name = f"{team}-{secrets.token_hex(3)}"
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    token = admin.post("/tokens", json={"user": name, "name": "test"}).json()["token"]
    accounts.append(f"gp-{name}")
    return name, client(pool, token)


def client(pool: Pool, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"{pool.server.url}/api/v1", headers=headers, timeout=30)


def test_a_hostile_job_on_a_joined_node_reaches_nothing(
    guarded: tuple[Pool, list[str]], exchange: Path
) -> None:
    pool, accounts = guarded
    admin = client(pool, pool.server.token)
    victim_user, team_a = member(pool, "team-a", accounts)
    _, team_b = member(pool, "team-b", accounts)
    on_n1 = {"resources": {"gpus": 1}, "gpu_types": ["H100"]}
    victim = team_a.post(
        "/jobs", json={"command": [sys.executable, "-c", VICTIM], "workdir": str(exchange), **on_n1}
    ).json()
    log = lambda job_id: admin.get(f"/jobs/{job_id}/logs").json().get("text", "")  # noqa: E731
    wait_for(lambda: "victim ready" in log(victim["id"]), 120, "team A's job to run on n1")
    node_dir = pool.nodes["n1"].data_dir
    attempt = node_dir / "jobs" / str(victim["id"]) / "attempts" / "1"
    state = json.loads((attempt / "state.json").read_text())
    from gpupool.runner.sandbox import members

    sandbox = state["sandbox"]
    workload = next(p for p in members(sandbox["pid_namespace"]) if p != sandbox["init_pid"])
    targets = {
        "db": str(pool.server.data_dir / "gpupool.db"),
        "data_dir": str(node_dir),
        "jobs_dir": str(node_dir / "jobs"),
        "victim_log": str(attempt / "output.log"),
        "victim_state": str(attempt / "state.json"),
        "victim_stop": str(attempt / "stop.json"),
        "victim_checkpoints": str(node_dir / "jobs" / str(victim["id"]) / "checkpoints"),
        "victim_workdir": str(exchange),
        "victim_id": victim["id"],
        "api": f"{pool.server.url}/api/v1",
        "victim_pid": workload,
        "victim_runner_pid": state["runner_pid"],
        "server_pid": pool.server.process.pid,
        "admin_config": str(pool.server.data_dir / "no-admin-config-here"),
        "gpus_given": 1,
        "uid": os.getuid(),
        "victim_user": victim_user,
    }
    own = {"HOSTILE_TOKEN": team_b.headers["Authorization"]}
    attacker = team_b.post(
        "/jobs", json={"command": hostile.command(targets), "env": own, **on_n1}
    ).json()
    done = wait_for(
        lambda: (
            (j := admin.get(f"/jobs/{attacker['id']}").json())["status"]
            in {"succeeded", "failed", "lost"}
            and j
        ),
        180,
        "the hostile job to end",
    )
    assert done["status"] == "succeeded", log(attacker["id"])
    assert done["placement"]["node"] == "n1"
    found = hostile.outcomes(log(attacker["id"]))
    assert hostile.allowed(found) == {}, found
    assert hostile.uid(log(attacker["id"])) not in (0, os.getuid())
    assert admin.get(f"/jobs/{victim['id']}").json()["status"] == "running"
    assert psutil.pid_exists(workload)
    (exchange / "release").touch()
    ended = wait_for(
        lambda: (
            (j := admin.get(f"/jobs/{victim['id']}").json())["status"]
            in {"succeeded", "failed", "lost"}
            and j
        ),
        120,
        "team A's job to end",
    )
    assert ended["status"] == "succeeded", log(victim["id"])
    assert "victim intact" in log(victim["id"])
