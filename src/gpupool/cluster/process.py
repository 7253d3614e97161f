"""One Ray node of this machine: a ``ray start --block`` and everything it starts.

It runs in a session of its own, so that every process Ray starts for it can be found and
stopped by that session (Ray's own ``ray stop`` kills every Ray process on the host by name,
other pools' too: never used). Its pid and start time are kept in a small JSON record, so
that a restarted server or joiner finds its node again instead of starting a second one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

READY_LINE = "Ray runtime started"
STOP_WAIT_S = 10.0
START_FIRST_WAIT_S = 1.0  # the wait after a first failed start; doubled, with jitter
START_LONGEST_WAIT_S = 30.0


class RayStartError(Exception):
    """``ray start`` ended, or did not say it was ready in time; the message has its log."""


class RayProcess:
    """``ray start ARGS --block`` with ``env`` added, its output in ``log_path``."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.argv = [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--block"]
        self.env, self.log_path = env, log_path
        self.pid: int | None = None
        self.create_time: float | None = None

    def start(self, timeout: float = 120.0, abort: threading.Event | None = None) -> None:
        """Start it and wait until Ray says the node runs (RayStartError otherwise, and when
        ``abort`` is set meanwhile: then the node is stopped)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            child = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
                close_fds=True,
            )
        self.pid, self.create_time = child.pid, psutil.Process(child.pid).create_time()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY_LINE in self._log_text():
                return
            if child.poll() is not None:
                raise RayStartError(f"ray start ended with code {child.returncode}: {self.tail()}")
            if abort is not None and abort.is_set():
                self.stop()
                raise RayStartError("stopped while the Ray node was starting")
            time.sleep(0.1)
        self.stop()
        raise RayStartError(f"ray start did not finish in {timeout:g} s: {self.tail()}")

    def again(self) -> RayProcess:
        """A new node like this one (same command, environment and log), not started: for
        a node that ended to be started again."""
        node = RayProcess([], self.env, self.log_path)
        node.argv = list(self.argv)
        return node

    def alive(self) -> bool:
        return self._process() is not None

    def stop(self, wait: float = STOP_WAIT_S) -> None:
        """SIGTERM to ``ray start`` (it stops what it started), then SIGKILL to whatever of its
        session is left. A raylet killed earlier may be a zombie: its parent reaps it."""
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            if self._process() is not None:
                os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self._process() is not None:
            time.sleep(0.1)
        kill_session(self.pid)

    def record(self) -> dict[str, object]:
        return {"pid": self.pid, "create_time": self.create_time, "argv": self.argv}

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record()))
        os.replace(tmp, path)

    @classmethod
    def found(cls, path: Path, env: dict[str, str], log_path: Path) -> RayProcess | None:
        """The node recorded at ``path`` when it still runs (same pid and start time)."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        node = cls([], env, log_path)
        node.argv, node.pid, node.create_time = data["argv"], data["pid"], data["create_time"]
        return node if node.alive() else None

    def tail(self, size: int = 2000) -> str:
        return self._log_text()[-size:].strip()

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _process(self) -> psutil.Process | None:
        try:
            process = psutil.Process(self.pid)
            same = self.create_time is None or abs(process.create_time() - self.create_time) < 1
            running = process.status() != psutil.STATUS_ZOMBIE
            return process if same and running else None
        except (psutil.Error, TypeError):
            return None


def start_node(
    node: RayProcess,
    tries: int,
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[float, float], float] = random.uniform,
) -> RayProcess:
    """``node`` started, or started again after a failed start, up to ``tries`` starts in
    all (RayStartError after the last). Machines that join at once keep the head busy, and
    Ray's ``ray start`` then gives up ("RPC error: Deadline Exceeded", "increase
    RAY_raylet_start_wait_time_s"): each wait is twice the one before, times a random factor,
    so that machines that failed together do not try again together."""
    wait = START_FIRST_WAIT_S
    for attempt in range(1, tries + 1):
        try:
            node.start()
            return node
        except RayStartError as error:
            node.stop()  # what is left of its session
            if attempt == tries:
                times = "once" if tries == 1 else f"in {tries} tries"
                raise RayStartError(f"the Ray node did not start {times}: {error}") from error
            pause = wait * jitter(0.5, 1.5)
            say(
                f"the Ray node did not start ({last_line(error)}); trying again in "
                f"{pause:.1f} s (try {attempt + 1} of {tries})"
            )
            sleep(pause)
            wait = min(wait * 2, START_LONGEST_WAIT_S)
            node = node.again()
    raise RayStartError(f"the Ray node did not start: no tries ({tries})")


def last_line(error: Exception) -> str:
    """What went wrong: the end of ``ray start``'s output holds the error."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]


def kill_session(leader: int) -> list[int]:
    """SIGKILL every process of the session ``leader`` started (its pid is the session id);
    the pids killed."""
    killed = []
    for process in psutil.process_iter(["pid"]):
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(process.pid) == leader and process.pid != os.getpid():
                process.kill()
                killed.append(process.pid)
    return killed
