"""The real ``gpupool`` CLI as a subprocess, and helpers for tests that drive it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.support import waiting

T = TypeVar("T")

CLI_TIMEOUT = 120.0
FINAL = {"succeeded", "failed", "cancelled", "lost"}


@dataclass
class Cli:
    """Runs ``python -m gpupool ARGS``; with a token, as that user via GPUPOOL_URL/TOKEN."""

    url: str
    token: str | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.token:
            env |= {"GPUPOOL_URL": self.url, "GPUPOOL_TOKEN": self.token}
        return env

    def __call__(
        self, *args: str, stdin: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "gpupool", *args]
        return subprocess.run(
            command,
            env=self.env(),
            cwd=cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )

    def popen(self, *args: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "gpupool", *args]
        return subprocess.Popen(
            command, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """Stdout of a command that must succeed."""
        result = self(*args, stdin=stdin)
        assert result.returncode == 0, f"gpupool {args} -> {result.returncode}: {result.stderr}"
        assert "Traceback" not in result.stderr
        return result.stdout

    def json(self, *args: str) -> Any:
        """The parsed ``-o json`` output of a command."""
        return json.loads(self.ok(*args, "-o", "json"))

    def submit(self, *args: str) -> int:
        """Submit with ``gpupool run ARGS`` and return the printed job id."""
        return int(self.ok("run", *args).strip())

    def job(self, job_id: int) -> dict[str, Any]:
        return self.json("show", str(job_id))


def refused(result: subprocess.CompletedProcess, code: str) -> bool:
    """True when the CLI printed one 'error [code]: ...' line, exit 1, and no traceback."""
    lines = result.stderr.strip().splitlines()
    return (
        result.returncode == 1
        and len(lines) == 1
        and lines[0].startswith(f"error [{code}]: ")
        and "Traceback" not in result.stderr
    )


def wait_status(cli: Cli, job_id: int, statuses: set[str], timeout: float = 90.0) -> dict:
    """Poll ``gpupool show -o json`` until the job has one of ``statuses``."""

    def probe() -> dict | None:
        job = cli.job(job_id)
        return job if job["status"] in statuses else None

    return waiting.wait_for(probe, timeout, f"job {job_id} to be {'/'.join(sorted(statuses))}", 0.2)


def hold(marker: Path, before: str = "", after: str = "") -> list[str]:
    """``-- sh -c SCRIPT``: ``before``, wait until ``marker`` exists (120 s at most), ``after``."""
    loop = f'i=0; while [ ! -e "{marker}" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done'
    return ["--", "sh", "-c", f"{before}{loop}{after}"]


def wait_for(check: Callable[[], T | None], timeout: float = 90.0, what: str = "condition") -> T:
    """``waiting.wait_for`` paced for CLI calls, which take a second or two each under load."""
    return waiting.wait_for(check, timeout, what, every=0.2)
