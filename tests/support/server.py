"""A real ``gpupool server`` subprocess on 127.0.0.1, for acceptance tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from tests.support.cleanup import kill_leftovers
from tests.support.schema import seed_data_dir

TOKEN = re.compile(r"--token (\S+)")
DECLARED = "4xA100-SXM4-80GB:80GiB"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """Start, kill -9 and restart a real server on one data directory."""

    def __init__(
        self,
        data_dir: Path,
        gpus: str = DECLARED,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        args: list[str] | None = None,
    ):
        """``prefix``: a command the server runs under (to run it as another account);
        ``args``: more options of ``gpupool server`` (may be changed before a restart)."""
        self.data_dir, self.gpus = data_dir, gpus
        self.prefix = prefix or []
        self.args = args or []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.token: str | None = None
        self.process: subprocess.Popen | None = None
        self.log_path = data_dir / "server-output.log"

    def start(self, timeout: float = 60) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.prefix and "GPUPOOL_DATABASE_URL" not in self.extra_env:
            seed_data_dir(self.data_dir)  # migrated once per test process, not per server
        env = (
            os.environ
            | {
                "GPUPOOL_DATA_DIR": str(self.data_dir),
                "GPUPOOL_DECLARED_CPUS": "64",
                "GPUPOOL_DECLARED_MEMORY": "256GiB",
                "GPUPOOL_STOP_GRACE_SECONDS": "2",
                "PYTHONUNBUFFERED": "1",
            }
            | self.extra_env
        )
        log = self.log_path.open("ab")
        command = [
            *self.prefix,
            sys.executable,
            "-m",
            "gpupool",
            "server",
            "--port",
            str(self.port),
            "--declare-gpus",
            self.gpus,
            "--log-level",
            "warning",
            *self.args,
        ]
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        self._wait_ready(timeout)
        self._read_token()
        return self

    def kill9(self) -> None:
        assert self.process is not None
        self._signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop the server and the jobs it left running (a real server leaves them to run)."""
        if self.process and self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()
        kill_leftovers(self.data_dir / "jobs")

    def _signal(self, sig: int) -> None:
        """Signal the server itself: under a ``prefix`` it is a descendant of the process
        started (which ends with it), and may not die with that process."""
        pids = [self.process.pid]
        if self.prefix:  # the server, not its runners: jobs outlive a server by design
            server = [sys.executable, "-m", "gpupool", "server"]
            with contextlib.suppress(psutil.Error):
                found = psutil.Process(self.process.pid).children(recursive=True)
                pids = [p.pid for p in found if p.cmdline()[:4] == server] + pids
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"server not ready in {timeout} s:\n{self.output()}")

    def _read_token(self) -> None:
        found = TOKEN.findall(self.output())
        if found:
            self.token = self.token or found[0]
