"""A newcomer's first steps, as README.md gives them, in a fresh copy of the checkout.

The copy holds what a clone of this working tree would: tracked and untracked files that git
does not ignore (so no .venv, no data, and nothing beside it: no ../shared). The commands
are read from the README's "First steps" block and typed into bash at the copy's root, each
after the block's `source .venv/bin/activate`, so the test fails when they go wrong (an
unquoted `&`, a command not on PATH).

`make serve` would create .venv and pip-install gpupool into it, which takes minutes; here
.venv is a link to the environment this test runs in, with the copy's `src/` first on
PYTHONPATH (that environment's own install points at this checkout), and the server is
started as `make serve` starts it, `gpupool server`, on a free port and a new data directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.support.cleanup import kill_leftovers
from tests.support.server import TOKEN, free_port
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.newcomer,
    pytest.mark.skipif(
        shutil.which("bwrap") is None,
        reason="bubblewrap (bwrap) is not installed: make serve installs it as root",
    ),
]
README_URL = "http://127.0.0.1:8765"  # what the README's login line shows
TIMEOUT = 120


def test_a_newcomer_follows_the_readme(checkout: Path, tmp_path: Path) -> None:
    steps = first_steps((checkout / "README.md").read_text())
    assert [step.split()[:2] for step in steps] == [
        ["source", ".venv/bin/activate"],
        ["gpupool", "login"],
        ["gpupool", "run"],
        ["gpupool", "simulate"],
    ], steps
    activate, login, run, simulate = steps
    typed = Shell(checkout, activate)
    where = typed("python -c 'import gpupool; print(gpupool.__file__)'")
    assert where.stdout.startswith(str(checkout / "src")), "the copy's code runs, not ours"

    with served(typed, tmp_path / "data") as (url, token):
        logged_in = typed(as_given(login, url, token))
        assert logged_in.returncode == 0, logged_in.stderr
        hello = typed(run)
        assert hello.returncode == 0, hello.stdout + hello.stderr
        assert "hello" in hello.stdout.splitlines()

    replayed = typed(f"{simulate} -o json")
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["trace"]["jobs"] == 40
    assert [row["policy"] for row in report["rows"]] == ["default", "fifo"]
    assert all(row["jobs"] + row["unscheduled"] == 40 for row in report["rows"])


def first_steps(readme: str) -> list[str]:
    """The commands of the README's "First steps" section (its indented block), in order."""
    section = readme.split("\n## First steps\n", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def as_given(login: str, url: str, token: str) -> str:
    """The README's login line with this server's URL and token in place of its examples."""
    words = shlex.split(login)
    assert README_URL in words and "gpt_..." in words, login
    return shlex.join(url if w == README_URL else token if w == "gpt_..." else w for w in words)


@pytest.fixture
def checkout() -> Iterator[Path]:
    """A copy of the checkout in a folder of its own: a job runs in it (as its working
    directory), so it lies where every account may read it, unlike pytest's tmp_path."""
    base = Path(tempfile.mkdtemp(prefix="gpupool-newcomer-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield copy_checkout(base / "gpupool")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def copy_checkout(target: Path) -> Path:
    """The files a clone of this working tree has: tracked and untracked ones git does not
    ignore, as they are now (a tracked file deleted here is left out); .venv links to the
    environment this test runs in (see the module's docstring)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.split(b"\0")):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            destination = target / os.fsdecode(name)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    assert not (target / ".venv").exists() and not (target.parent / "shared").exists()
    (target / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return target


class Shell:
    """Lines typed into bash at the copy's root, after the README's activation line."""

    def __init__(self, checkout: Path, activate: str) -> None:
        self.checkout, self.activate = checkout, activate
        self.env = os.environ | {"PYTHONPATH": str(checkout / "src"), "PYTHONUNBUFFERED": "1"}

    def __call__(self, line: str) -> subprocess.CompletedProcess:
        typed = self.arguments(line)
        return subprocess.run(**typed, capture_output=True, text=True, timeout=TIMEOUT)

    def arguments(self, line: str, **env: str) -> dict[str, Any]:
        """What subprocess needs to type ``line`` (with ``env`` added to the environment)."""
        script = f"{self.activate} && {line}"
        return {"args": ["bash", "-c", script], "cwd": self.checkout, "env": self.env | env}


@contextlib.contextmanager
def served(typed: Shell, data: Path) -> Iterator[tuple[str, str]]:
    """`gpupool server` (what `make serve` runs) in the copy: its URL and the token its
    first-start banner printed; stopped, with the jobs it left, on exit."""
    port = free_port()
    url, output = f"http://127.0.0.1:{port}", data.parent / "server-output.log"
    # exec: the server replaces bash, so that stopping the process stops the server
    command = typed.arguments(f"exec gpupool server --port {port}", GPUPOOL_DATA_DIR=str(data))
    with output.open("wb") as log:
        process = subprocess.Popen(**command, stdout=log, stderr=subprocess.STDOUT)
    try:
        token = wait_for(lambda: banner_token(process, output), TIMEOUT, "the banner", 0.1)
        wait_for(lambda: answers(url), TIMEOUT, "the server to answer", 0.1)
        yield url, token
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        kill_leftovers(data / "jobs")


def banner_token(process: subprocess.Popen, output: Path) -> str | None:
    """The token of the first-start banner's login line, once printed."""
    text = output.read_text(errors="replace")
    if process.poll() is not None:
        raise AssertionError(f"the server exited:\n{text}")
    found = TOKEN.findall(text)
    return found[0] if found else None


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
