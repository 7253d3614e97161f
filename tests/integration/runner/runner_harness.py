"""Helpers for the runner tests: write spec.json by hand and run the real runner on it."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import psutil
from tests.support.waiting import wait_for  # noqa: F401 - used by the tests through here

T = TypeVar("T")
PYTHON = sys.executable


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def py(code: str) -> list[str]:
    """A workload command running ``code`` in this interpreter."""
    return [PYTHON, "-c", code]


def bwrap() -> str | None:
    return shutil.which("bwrap")


def sandbox_policy(root: Path) -> dict[str, Any]:
    """A sandbox as the executor asks for one: the system and this Python shown read-only,
    the harness's own files hidden."""
    system = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"]
    return {
        "bwrap": bwrap(),
        "setpriv": shutil.which("setpriv"),
        "readonly": [*system, sys.base_prefix, sys.prefix],
        "hidden": [str(root / "attempts")],
        "devices": [],
    }


def nobody() -> dict[str, Any]:
    entry = pwd.getpwnam("nobody")
    return {"name": "nobody", "uid": entry.pw_uid, "gid": entry.pw_gid, "groups": [entry.pw_gid]}


class RunnerHarness:
    """One attempt directory, a spec.json written by the test, and the runner on it.

    Its root is a fresh directory under /tmp that other accounts may enter, as a sandboxed
    job under its own account must reach its directories; ``work`` is a directory such a
    job may use as its working directory (release files, scripts)."""

    def __init__(self, sandboxed: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gpupool-runner-", dir="/tmp"))
        self.root.chmod(0o755)
        self.sandboxed = sandboxed
        self.dir = self.root / "attempts" / "1"
        self.checkpoint_dir = self.root / "checkpoints"
        self.output_dir = self.root / "outputs"
        self.work = self.root / "work"
        self.work.mkdir(mode=0o777)
        self.work.chmod(0o1777)
        self.spawned: list[subprocess.Popen[bytes]] = []

    def write_spec(self, command: list[str], **overrides: Any) -> dict[str, Any]:
        self.dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "version": 1,
            "job_id": 42,
            "attempt": 1,
            "command": command,
            "env": {"PATH": os.environ.get("PATH", os.defpath)},
            "workdir": None,
            "gpu_uuids": [],
            "log_limit_bytes": 1 << 20,
            "stop_grace_seconds": 10.0,
            "checkpoint_dir": str(self.checkpoint_dir),
            "output_dir": str(self.output_dir),
        }
        if self.sandboxed:
            spec["sandbox"] = sandbox_policy(self.root)
            spec["protected"] = [str(self.dir.parent)]
            if os.geteuid() == 0:
                spec["account"] = nobody()
        spec.update(overrides)
        (self.dir / "spec.json").write_text(json.dumps(spec))
        return spec

    def run(self, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run the runner to completion."""
        argv = [PYTHON, "-m", "gpupool.runner", str(self.dir)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def spawn(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start the runner in the background, as an executor does."""
        proc = subprocess.Popen(
            [PYTHON, "-m", "gpupool.runner", str(self.dir)],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
        self.spawned.append(proc)
        return proc

    def state(self) -> dict[str, Any]:
        return json.loads((self.dir / "state.json").read_text())

    def log(self) -> str:
        path = self.dir / "output.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        wait_for(lambda: text in self.log(), timeout, what=f"{text!r} in output.log")

    def wait_for_exit(self, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
        wait_for(lambda: proc.poll() is not None, timeout, what="the runner to exit")
        return proc.returncode

    def cleanup(self) -> None:
        for proc in self.spawned:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            state = self.state()
            if is_alive(state["pid"]):
                os.killpg(state["pgid"], signal.SIGKILL)
