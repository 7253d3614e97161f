"""An 'outside world' for tests of jobs' egress: a thread in a network namespace the test
makes itself (root), holding a veth pair and a default route as a machine has, with servers
on an 'outside' address (TEST-NET-2) and on its loopback. What the thread starts (a server,
an executor's fork server and its pasta) lives in that namespace, never the machine's."""

from __future__ import annotations

import ctypes
import socket
import subprocess
import threading
from typing import Any

import pytest


class World:
    """A thread in a network namespace of its own: lo, a veth pair (the 'machine's'
    interface and a peer holding the 'outside' address), a default route; servers there."""

    outside = "198.51.100.1"  # TEST-NET-2, only inside the test's own namespace
    machine = "192.0.2.77"

    def __init__(self) -> None:
        self.port = 0
        self.loopback_port = 0
        self.requests: list[tuple[str, Any]] = []
        self.ready = threading.Event()
        self.work = threading.Condition()
        self.failure: BaseException | None = None

    def run(self, h: Any) -> subprocess.CompletedProcess[str]:
        """A runner harness's runner, run from inside the namespace (it inherits it) to its
        end."""
        return self.call(h.run)

    def call(self, function: Any) -> Any:
        """``function()`` called in the namespace's thread (what it starts is there)."""
        result: list[Any] = []
        with self.work:
            self.requests.append(("call", (function, result)))
            self.work.notify()
            self.work.wait_for(lambda: result or self.failure, timeout=180)
        if self.failure:
            raise self.failure
        return result[0]

    def serve(self) -> None:
        try:
            enter_new_network_namespace()
            for argv in (
                ["ip", "link", "set", "lo", "up"],
                ["ip", "link", "add", "gp0", "type", "veth", "peer", "name", "gp1"],
                ["ip", "addr", "add", f"{self.machine}/24", "dev", "gp0"],
                ["ip", "addr", "add", f"{self.outside}/24", "dev", "gp1"],
                ["ip", "link", "set", "gp0", "up"],
                ["ip", "link", "set", "gp1", "up"],
                ["ip", "route", "add", "default", "via", "192.0.2.1", "dev", "gp0"],
            ):
                subprocess.run(argv, check=True, capture_output=True)
            outside = socket.create_server((self.outside, 0))
            loopback = socket.create_server(("127.0.0.1", 0))
            self.port, self.loopback_port = outside.getsockname()[1], loopback.getsockname()[1]
            for server, said in ((outside, b"outside\n"), (loopback, b"the machine's loopback\n")):
                threading.Thread(target=answer, args=(server, said), daemon=True).start()
        except BaseException as error:  # noqa: BLE001 - reported to the test's thread
            self.failure = error
            self.ready.set()
            return
        self.ready.set()
        with self.work:
            while True:
                self.work.wait_for(lambda: self.requests)
                kind, (function, result) = self.requests.pop()
                if kind == "stop":
                    return
                try:
                    result.append(function())
                except BaseException as error:  # noqa: BLE001
                    self.failure = error
                self.work.notify_all()


class outside_world:  # noqa: N801 - used as a context manager, like a function
    def __enter__(self) -> World:
        self.world = World()
        self.thread = threading.Thread(target=self.world.serve, daemon=True)
        self.thread.start()
        self.world.ready.wait(30)
        if self.world.failure is not None:
            pytest.skip(f"cannot make a network namespace with a veth pair: {self.world.failure}")
        return self.world

    def __exit__(self, *exc: object) -> None:
        with self.world.work:
            self.world.requests.append(("stop", (None, None)))
            self.world.work.notify_all()
        self.thread.join(10)


def enter_new_network_namespace() -> None:
    """unshare(CLONE_NEWNET) for the calling thread alone (and what it starts)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")


def answer(server: socket.socket, said: bytes) -> None:
    while True:
        conn, _ = server.accept()
        with conn:
            conn.sendall(said)
