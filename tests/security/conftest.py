"""The security tier: a real server with two teams, run as root (each job under its user's
own Unix account) or as an unprivileged account (jobs under it, in a user namespace)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import REPO
from tests.support.server import ServerProcess
from tests.support.unix import SBIN
from tests.support.waiting import wait_for

GPUS = "4xA100-SXM4-80GB:80GiB"
DEVICE_NAMES = ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm")
FINAL = {"succeeded", "failed", "cancelled", "lost"}


@dataclass
class Pool:
    """A running server, its admin, and what a test needs to reach around it."""

    server: ServerProcess
    home: Path  # the server account's HOME: the admin's saved CLI token is there
    devices: Path  # stand-in /dev/nvidia* of the 4 declared GPUs
    as_root: bool
    admin: httpx.Client = field(init=False)
    accounts: list[str] = field(default_factory=list)  # Unix accounts to remove afterwards

    def __post_init__(self) -> None:
        self.admin = self.client(self.server.token)
        config = self.home / ".config" / "gpupool" / "config.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"url": self.server.url, "token": self.server.token}))
        config.chmod(0o600)
        self.admin_config = config
        _give(self.home, self.server_uid())

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"{self.server.url}/api/v1", headers=headers, timeout=30)

    def member(self, team: str) -> tuple[str, httpx.Client]:
        """A new member of ``team`` (made if new) and a client with their token."""
        if team not in {t["name"] for t in self.admin.get("/teams").json()}:
            assert self.admin.post("/teams", json={"name": team}).status_code == 201
        name = f"{team}-{secrets.token_hex(3)}"
        created = self.admin.post("/users", json={"name": name, "teams": [team]})
        assert created.status_code == 201, created.text
        token = self.admin.post("/tokens", json={"user": name, "name": "test"}).json()["token"]
        self.accounts.append(f"gp-{name}")
        return name, self.client(token)

    def submit(self, client: httpx.Client, command: list[str], **fields: Any) -> dict:
        answer = client.post("/jobs", json={"command": command, **fields})
        assert answer.status_code == 201, answer.text
        return answer.json()

    def job(self, job_id: int) -> dict:
        return self.admin.get(f"/jobs/{job_id}").json()

    def wait(self, job_id: int, statuses: set[str], timeout: float = 60) -> dict:
        def check() -> dict | None:
            job = self.job(job_id)
            return job if job["status"] in statuses else None

        return wait_for(check, timeout, f"job {job_id} to be {statuses}", 0.05)

    def attempt_dir(self, job_id: int, attempt: int = 1) -> Path:
        return self.server.data_dir / "jobs" / str(job_id) / "attempts" / str(attempt)

    def state(self, job_id: int, attempt: int = 1) -> dict:
        return json.loads((self.attempt_dir(job_id, attempt) / "state.json").read_text())

    def log(self, job_id: int) -> str:
        return self.admin.get(f"/jobs/{job_id}/logs").json().get("text", "")

    def server_pid(self) -> int:
        """The gpupool server itself (under the account switch when there is one)."""
        outer = psutil.Process(self.server.process.pid)
        for proc in [outer, *outer.children(recursive=True)]:
            if proc.cmdline()[:4] == [sys.executable, "-m", "gpupool", "server"]:
                return proc.pid
        raise AssertionError("no gpupool server process found")

    def server_uid(self) -> int:
        return os.getuid() if self.as_root else _server_account_uid(self)


def _server_account_uid(pool: Pool) -> int:
    return pool.server.data_dir.stat().st_uid


@pytest.fixture(params=["root", "unprivileged"])
def pool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pool]:
    """A real server on 4 declared GPUs with stand-in device files; as root, each user's
    jobs run under an account of their own (GPUPOOL_CREATE_UNIX_USERS)."""
    as_root = request.param == "root"
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    if as_root and os.geteuid() != 0:
        pytest.skip("the server runs as root only when the tests do (CI does)")
    base = Path(tempfile.mkdtemp(prefix="gpupool-sec-", dir="/tmp"))
    base.chmod(0o755)
    devices = stand_in_devices(base / "dev")
    home, data = base / "home", base / "data"
    home.mkdir()
    data.mkdir(mode=0o700)
    account = None if as_root or os.geteuid() != 0 else _new_account("gpt-srv")
    env = {
        "HOME": str(home),
        "GPUPOOL_DEVICE_DIR": str(devices),
        "GPUPOOL_CREATE_UNIX_USERS": "true",
        "GPUPOOL_GPU_MEMORY_SAMPLER": f"file:{base / 'nvml.json'}",
        "GPUPOOL_GPU_MEMORY_GRACE_SECONDS": "1",
    }
    prefix = []
    if account is not None:
        uid = pwd.getpwnam(account).pw_uid
        for path in (home, data):
            _give(path, uid)
        prefix = run_as(account)
    server = ServerProcess(data, gpus=GPUS, env=env, prefix=prefix).start()
    found = Pool(server, home, devices, as_root)
    try:
        yield found
    finally:
        server.stop()
        for name in found.accounts + ([account] if account else []):
            _remove_account(name)
        shutil.rmtree(base, ignore_errors=True)


def stand_in_devices(directory: Path) -> Path:
    """Files standing in for /dev/nvidia*: a sandbox binds them as it would the real nodes."""
    directory.mkdir(mode=0o755)
    for name in DEVICE_NAMES:
        (directory / name).write_text(name)
        (directory / name).chmod(0o666)
    return directory


def run_as(account: str) -> list[str]:
    """A command prefix that runs a program as ``account``, with this Python and this checkout
    reachable even when they live under root's home (0700): a mount namespace where only
    those paths of /root are shown, then setpriv."""
    entry = pwd.getpwnam(account)
    argv = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/root", "--die-with-parent"]
    made: set[str] = set()
    for path in dict.fromkeys([sys.base_prefix, sys.prefix, str(REPO)]):
        if not path.startswith("/root/"):
            continue
        parts = Path(path).relative_to("/root").parts
        for depth in range(1, len(parts)):
            parent = str(Path("/root", *parts[:depth]))
            if parent not in made:
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
        argv += ["--bind", path, path]
    ids = [f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    return [*argv, "--", "setpriv", *ids, "--inh-caps=-all", "--"]


def _new_account(prefix: str) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    useradd = shutil.which("useradd", path=SBIN)
    if useradd is None:
        pytest.skip("useradd is not installed")
    subprocess.run([useradd, "--system", "--no-create-home", name], check=True)
    return name


def _remove_account(name: str) -> None:
    """Delete an account the test made (or the server made for it), after what still runs
    under it (the server's fork server, a runner that was asked to stop) has ended."""
    with contextlib.suppress(KeyError):
        uid = pwd.getpwnam(name).pw_uid
        left = [
            p
            for p in psutil.process_iter(["uids"])
            if p.info["uids"] and p.info["uids"].real == uid
        ]
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=10)
    userdel = shutil.which("userdel", path=SBIN) or "userdel"
    subprocess.run([userdel, "--force", name], capture_output=True, check=False)


def _give(path: Path, uid: int) -> None:
    """Hand a directory tree to the account the server runs as."""
    gid = pwd.getpwuid(uid).pw_gid
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, gid)
    os.lchown(path, uid, gid)
