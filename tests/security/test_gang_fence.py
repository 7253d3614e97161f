"""A job over several nodes keeps the nodes' network (issue 23): another team's job on those
nodes tries its rendezvous store and the pool's Ray GCS, and is refused both by the node's
fence, while the gang's own tasks reach their store; the fence goes with the gang.

A real pool (a server with --ray, its machine node ``head``, and a joined node ``n1``) in the
network namespace of ``scripts/loopback-only``, as root: each user's jobs run under an account
of their own, and the fence's nftables tables live in that namespace, never the machine's.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.executors.fence import FENCE_DIR
from gpupool.runner.fence import NOT_ENFORCED, table_name
from gpupool.settings import Settings
from tests.security.conftest import _remove_account
from tests.support.pool import Pool, need_loopback_namespace
from tests.support.waiting import wait_for

GPUS = "2xA100-SXM4-80GB:80GiB"
NFT = shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin:/bin")
FINAL = {"succeeded", "failed", "cancelled", "lost"}
# team A's gang: rank 0 serves torch's store at MASTER_ADDR:MASTER_PORT, rank 1 reaches it
GANG = """
import os, socket, time
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if os.environ["RANK"] == "0":
    store = socket.create_server((addr, port))
    store.settimeout(0.2)
    with open("port.tmp", "w") as f:
        f.write(str(port))
    os.chmod("port.tmp", 0o644)
    os.rename("port.tmp", "port")
    while not os.path.exists("done"):
        try:
            store.accept()[0].close()
        except OSError:
            pass
else:
    for _ in range(300):
        try:
            socket.create_connection((addr, port), timeout=5).close()
            print("OWN TASK REACHED ITS STORE", flush=True)
            break
        except OSError as e:
            said = type(e).__name__
            time.sleep(0.1)
    else:
        print("OWN TASK NOT", said, flush=True)
    while not os.path.exists("done"):
        time.sleep(0.1)
"""
# team B's job over the same nodes: tries A's store and the pool's GCS from the node
HOSTILE = """
import os, socket, sys, time
while not os.path.exists("port"):
    time.sleep(0.1)
targets = {"store": int(open("port").read()), "gcs": int(sys.argv[1])}
for name, port in targets.items():
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        print(name, "CONNECTED", flush=True)
    except OSError as e:
        print(name, type(e).__name__, flush=True)
"""

pytestmark = pytest.mark.skipif(NFT is None, reason="nftables (nft) is missing")


@pytest.fixture
def gang_pool(tmp_path: Path) -> Iterator[Pool]:
    need_loopback_namespace()
    env = {"GPUPOOL_CREATE_UNIX_USERS": "true"}
    pool = Pool.start(tmp_path / "pool", head_gpus=GPUS, env=env)
    try:
        pool.join("n1", GPUS)
        yield pool
    finally:
        pool.stop()


def test_another_teams_job_cannot_reach_a_gangs_store_or_the_gcs(
    gang_pool: Pool, exchange: Path
) -> None:
    admin = _client(gang_pool, gang_pool.server.token)
    accounts: list[str] = []  # made by the server for the two users: removed afterwards
    try:
        owner = _member(admin, "ta")
        accounts.append(f"gp-{owner[0]}")
        hostile = _member(admin, "tb")
        accounts.append(f"gp-{hostile[0]}")
        gang = _submit(owner[1], [sys.executable, "-c", GANG], exchange, launcher="torch")
        wait_for(lambda: (exchange / "port").exists(), 120, "the gang's store")
        ray_port = gang_pool.env["GPUPOOL_RAY_PORT"]
        probe = _submit(hostile[1], [sys.executable, "-c", HOSTILE, ray_port], exchange)
        probed = _wait(admin, probe)
        (exchange / "done").touch()
        ended = _wait(admin, gang)
        said = _log(admin, probe)
        assert probed["status"] == "succeeded", (probed["message"], said)
        assert "store ConnectionRefusedError" in said, said
        assert "gcs ConnectionRefusedError" in said, said
        assert ended["status"] == "succeeded", (ended["message"], _log(admin, gang))
        assert "OWN TASK REACHED ITS STORE" in _log(admin, gang)
        notes = [e["message"] for e in ended["events"] if NOT_ENFORCED in e["message"]]
        assert notes == []
        for data_dir in (gang_pool.server.data_dir / "cluster" / "node", gang_pool.root / "n1"):
            table = table_name(str(Settings(data_dir=data_dir).jobs_dir / FENCE_DIR))
            # taken down by the node once its last gang's attempt ended: after the job's end
            wait_for(lambda t=table: not _table_exists(t), 30, f"{table} to go with the gang")
    finally:
        (exchange / "done").touch()
        for account in accounts:
            _remove_account(account)


def _client(pool: Pool, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=f"{pool.server.url}/api/v1", headers=headers, timeout=30)


def _member(admin: httpx.Client, team: str) -> tuple[str, httpx.Client]:
    """A user of a team of their own (each runs under an account of their own)."""
    assert admin.post("/teams", json={"name": team}).status_code == 201
    name = f"{team}-{secrets.token_hex(3)}"
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    token = admin.post("/tokens", json={"user": name, "name": "t"}).json()["token"]
    return name, httpx.Client(
        base_url=str(admin.base_url), headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _submit(client: httpx.Client, command: list[str], workdir: Path, **fields: object) -> int:
    body = {"command": command, "workdir": str(workdir), "nodes": 2, "resources": {"gpus": 1}}
    answer = client.post("/jobs", json=body | fields)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _wait(admin: httpx.Client, job_id: int) -> dict:
    def ended() -> dict | None:
        job = admin.get(f"/jobs/{job_id}").json()
        return job if job["status"] in FINAL else None

    return wait_for(ended, 240, f"job {job_id} to end", 0.2)


def _log(admin: httpx.Client, job_id: int) -> str:
    return admin.get(f"/jobs/{job_id}/logs").json().get("text", "")


def _table_exists(name: str) -> bool:
    with contextlib.suppress(OSError):
        argv = [str(NFT), "list", "table", "inet", name]
        return subprocess.run(argv, capture_output=True).returncode == 0
    return False
