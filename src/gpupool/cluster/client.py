"""The server's side of the bridge: requests to Ray through a child process.

``ClusterClient.call`` sends one request and waits for its answer. When the bridge is gone
(the head went away and Ray ended it, or it never connected) every waiting call fails with
``ClusterUnavailable``, the client says since when the cluster is unreachable, and the next
call starts a new bridge once ``retry_seconds`` have passed and the head's port answers
again: the server itself never stops. Ray's calls block while the head is away, so the
server does not wait for Ray to notice: its head watch tells the client (``lost``), which
ends the bridge at once and fails what waits on it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from gpupool.cluster.probe import gcs_answers

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 60.0
RETRY_SECONDS = 2.0


class ClusterUnavailable(Exception):
    """The cluster could not be asked (no bridge, no head); ``str`` says why."""


class AgentUnavailable(Exception):
    """The cluster answered, and the node's agent could not (its node is gone or down)."""


class CallFailed(Exception):
    """The agent raised: a defect of ours, logged by the caller."""


class ClusterClient:
    """Owns the bridge process; thread-safe. ``env``: what the bridge runs with (Ray's
    settings and the token's path); ``log_path``: where its output goes."""

    def __init__(
        self,
        address: str,
        env: dict[str, str],
        log_path: Path,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.address, self.env, self.log_path = address, env, log_path
        self.retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, Future[Any]] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._requests: Any = None
        self._tried_at = -1e9
        self.unreachable_since: float | None = time.time()
        self.problem: str | None = "not connected yet"

    # -- asking -------------------------------------------------------------------------------

    def call(self, node: str, method: str, timeout: float = 30.0, **args: Any) -> Any:
        """``method(**args)`` on ``node``'s agent."""
        request = {"op": "call", "node": node, "method": method, "args": args, "timeout": timeout}
        return self.request(request, timeout + 5.0)

    def nodes(self) -> list[dict[str, Any]]:
        return self.request({"op": "nodes"}, 30.0)

    def forget_agent(self, node: str) -> None:
        self.request({"op": "forget_agent", "node": node}, 30.0)

    def request(self, request: dict[str, Any], timeout: float) -> Any:
        future = self._send(request)
        try:
            answer = future.result(timeout)
        except FutureTimeout:
            raise ClusterUnavailable(f"the cluster did not answer in {timeout:g} s") from None
        if answer.get("ok"):
            return answer.get("result")
        error, message = answer.get("error"), answer.get("message", "")
        if error in ("agent_unavailable", "timeout"):  # the cluster answered; the node did not
            raise AgentUnavailable(message)
        if error in ("unreachable", "bridge_gone"):
            raise ClusterUnavailable(message)
        raise CallFailed(message)

    @property
    def reachable(self) -> bool:
        return self.unreachable_since is None

    def connect(self, timeout: float = CONNECT_TIMEOUT_S) -> bool:
        """Start the bridge now if it is not running; True once it is connected."""
        with self._lock:
            self._tried_at = -1e9
        try:
            self._send({"op": "nodes"}).result(timeout)
        except (ClusterUnavailable, FutureTimeout):
            return False
        return self.reachable

    def lost(self, why: str) -> None:
        """The head is gone (its watch saw it): unreachable from now, and the bridge, whose
        calls would block until Ray gives up, is ended so that every waiting call fails."""
        with self._lock:
            self._mark_unreachable(why)
            process, self._process = self._process, None
            requests = self._requests  # a new bridge started after the lock has its own
            self._fail_all(self.problem or why)
        if process is not None:
            with contextlib.suppress(OSError):
                requests.close()
            _end(process, wait=0.0)  # stuck in Ray's calls, it may take seconds to hear TERM

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
            self._fail_all("the server is stopping")
        if process is not None:
            with contextlib.suppress(OSError):
                self._requests.close()
            _end(process)

    # -- the bridge ---------------------------------------------------------------------------

    def _send(self, request: dict[str, Any]) -> Future[Any]:
        with self._lock:
            self._ensure_bridge()
            ident = next(self._ids)
            future: Future[Any] = Future()
            self._waiting[ident] = future
            try:
                self._requests.write(json.dumps({**request, "id": ident}) + "\n")
                self._requests.flush()
            except (OSError, ValueError) as error:
                self._waiting.pop(ident, None)
                raise ClusterUnavailable(f"the bridge is gone: {error}") from None
            return future

    def _ensure_bridge(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        if time.monotonic() - self._tried_at < self.retry_seconds:
            raise ClusterUnavailable(self.problem or "the cluster is unreachable")
        self._tried_at = time.monotonic()
        if not gcs_answers(self.address):  # a bridge would only wait for it in ray.init
            self._mark_unreachable("its port does not accept connections")
            raise ClusterUnavailable(self.problem)
        self._start_bridge()

    def _start_bridge(self) -> None:
        to_bridge_r, to_bridge_w = os.pipe()
        from_bridge_r, from_bridge_w = os.pipe()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "gpupool.cluster.bridge", self.address]
        argv += [str(to_bridge_r), str(from_bridge_w)]
        with open(self.log_path, "ab") as out:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                pass_fds=(to_bridge_r, from_bridge_w),
                start_new_session=True,
            )
        os.close(to_bridge_r)
        os.close(from_bridge_w)
        self._requests = os.fdopen(to_bridge_w, "w")
        reader = threading.Thread(
            target=self._read,
            args=(self._process, os.fdopen(from_bridge_r)),
            name="gpupool-bridge-reader",
            daemon=True,
        )
        reader.start()

    def _read(self, process: subprocess.Popen[bytes], answers: Any) -> None:
        """Hand each answer to its caller; when the bridge ends, fail every waiting call."""
        with answers:
            for line in answers:
                try:
                    answer = json.loads(line)
                except ValueError:
                    continue
                if answer.get("id") == 0:
                    self._connected(answer)
                    continue
                with self._lock:
                    future = self._waiting.pop(answer.get("id"), None)
                if future is not None:
                    future.set_result(answer)
        _end(process)
        with self._lock:
            if self._process is process:
                self._process = None
                if self.reachable:
                    self._mark_unreachable("the connection to the head was lost")
                self._fail_all(self.problem or "the cluster is unreachable")

    def _connected(self, answer: dict[str, Any]) -> None:
        with self._lock:
            if answer.get("ok"):
                if self.unreachable_since is not None:
                    log.info("connected to the Ray cluster at %s", self.address)
                self.unreachable_since, self.problem = None, None
            else:
                self._mark_unreachable(answer.get("message") or "cannot connect")

    def _mark_unreachable(self, why: str) -> None:
        if self.unreachable_since is None:
            log.warning("the Ray cluster at %s is unreachable: %s", self.address, why)
            self.unreachable_since = time.time()
        self.problem = f"the Ray cluster at {self.address} is unreachable: {why}"

    def _fail_all(self, why: str) -> None:
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            future.set_result({"ok": False, "error": "bridge_gone", "message": why})


def _end(process: subprocess.Popen[bytes], wait: float = 5.0) -> None:
    """SIGTERM, and SIGKILL after ``wait`` seconds (at once with 0)."""
    if process.poll() is None:
        if wait > 0:
            process.terminate()
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
