"""The node's fence around a gang's task on the node's network (``runner.fence``), applied
by the real runner with nftables in a network namespace this test makes (never the
machine's own): a job's account is refused the platform's listeners and another gang's
rendezvous, root and the gang's owner are not, and the rules end with the task, or at the
next update when its runner was killed with -9."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from runner_harness import RunnerHarness, nobody, wait_for

from gpupool.runner import fence
from gpupool.runner.wire import FencePolicy

T = TypeVar("T")
NFT = shutil.which("nft", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
OTHER_JOB_UID = 65533  # another team's job account (no passwd entry needed to run as it)
OUTCOMES = {0: "CONNECTED", 1: "ConnectionRefusedError"}
# the node's platform processes (its Ray node): two listeners, a service and the server's API
PLATFORM = """
import socket, sys, time
held = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
print(*(s.getsockname()[1] for s in held), flush=True)
sys.stdin.read()
"""

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="nftables rules in a namespace: root"),
    pytest.mark.skipif(NFT is None, reason="nftables (nft) is missing: make test installs it"),
]


class Namespace:
    """A thread in a network namespace of its own (lo up); what it starts is there."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, initializer=_enter_new_network_namespace)
        self.tid = self.call(threading.get_native_id)
        self.call(lambda: subprocess.run(["ip", "link", "set", "lo", "up"], check=True))
        self.path = f"/proc/{os.getpid()}/task/{self.tid}/ns/net"
        self.held: list[socket.socket] = []
        self.platform: subprocess.Popen[str] | None = None

    def call(self, function: Callable[[], T]) -> T:
        return self.pool.submit(function).result(timeout=120)

    def listen(self) -> int:
        """A listener of root's (the test's account) on the namespace's loopback."""
        server = self.call(lambda: socket.create_server(("127.0.0.1", 0)))
        self.held.append(server)
        return server.getsockname()[1]

    def start_platform(self) -> tuple[int, int, int]:
        """A platform process of root's (pid, service port, API port), in the namespace."""
        argv = [sys.executable, "-c", PLATFORM]
        self.platform = self.call(
            lambda: subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
        assert self.platform.stdout is not None
        service, api = (int(p) for p in self.platform.stdout.readline().split())
        return self.platform.pid, service, api

    def connect(self, port: int, uid: int) -> str:
        """How a connection from a process of ``uid`` (a child forked in the namespace,
        that only switches account and connects) to ``port`` ends."""
        pid = self.call(lambda: _fork_connect(port, uid))
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        return OUTCOMES.get(code, f"exit {code}")

    def table(self, name: str) -> str:
        argv = ["nsenter", f"--net={self.path}", str(NFT), "list", "table", "inet", name]
        done = subprocess.run(argv, capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else ""

    def close(self) -> None:
        for server in self.held:
            server.close()
        if self.platform is not None:
            self.platform.kill()
            self.platform.wait()
        self.pool.shutdown()


@pytest.fixture
def netns() -> Iterator[Namespace]:
    try:
        ns = Namespace()
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"cannot make a network namespace: {error}")
    yield ns
    ns.close()


@pytest.fixture
def h() -> Iterator[RunnerHarness]:
    harness = RunnerHarness()
    yield harness
    harness.cleanup()
    shutil.rmtree(harness.root, ignore_errors=True)


def test_a_gang_task_fences_the_platform_and_its_rendezvous_until_it_ends(
    h: RunnerHarness, netns: Namespace
) -> None:
    pid, platform, api = netns.start_platform()
    elsewhere, rendezvous = netns.listen(), netns.listen()  # root's, not the platform's
    policy = _policy(h, netns, rendezvous, open_ports=[api]) | {"platform_pids": [pid]}
    release = h.work / "release"
    _write_gang_task(h, policy, release)
    runner = h.spawn()
    table = str(policy["table"])
    wait_for(lambda: f"dport {rendezvous}" in netns.table(table), 30, "the gang's rules")
    owner = nobody()["uid"]

    assert netns.connect(platform, OTHER_JOB_UID) == "ConnectionRefusedError"
    assert netns.connect(platform, owner) == "ConnectionRefusedError"
    assert netns.connect(platform, 0) == "CONNECTED"  # the platform's own account
    assert netns.connect(api, OTHER_JOB_UID) == "CONNECTED"  # the server's API stays open
    assert netns.connect(elsewhere, OTHER_JOB_UID) == "CONNECTED"  # not the platform's
    assert netns.connect(rendezvous, owner) == "CONNECTED"
    assert netns.connect(rendezvous, OTHER_JOB_UID) == "ConnectionRefusedError"
    assert "notes" not in h.state(), h.state()

    release.touch()
    assert h.wait_for_exit(runner) == 0
    assert netns.table(table) == "", "the last gang's end takes the table away"
    assert netns.connect(platform, OTHER_JOB_UID) == "CONNECTED"


def test_the_rules_of_a_runner_killed_with_9_go_at_the_next_update(
    h: RunnerHarness, netns: Namespace
) -> None:
    platform, rendezvous = netns.listen(), netns.listen()
    policy = _policy(h, netns, rendezvous)  # no platform_pids: every listener of root's
    _write_gang_task(h, policy, h.work / "never")
    runner = h.spawn()
    table = str(policy["table"])
    wait_for(lambda: f"dport {rendezvous}" in netns.table(table), 30, "the gang's rules")
    runner.kill()
    runner.wait()
    h.cleanup()  # its workload too, as the node's sweep of cgroups does
    assert f"dport {rendezvous}" in netns.table(table), "nothing took them out yet"
    assert netns.connect(platform, OTHER_JOB_UID) == "ConnectionRefusedError"

    assert fence.update(FencePolicy(policy)) is None  # as the next gang's start does
    assert netns.table(table) == ""
    assert netns.connect(rendezvous, OTHER_JOB_UID) == "CONNECTED"


def test_without_nft_the_task_runs_and_says_it_is_not_fenced(
    h: RunnerHarness, netns: Namespace
) -> None:
    policy = _policy(h, netns, netns.listen()) | {"nft": None}
    _write_gang_task(h, policy, None)
    assert h.run().returncode == 0
    state = h.state()
    assert state["exit_code"] == 0
    assert state["notes"] == [f"{fence.NOT_ENFORCED}: nftables (nft) is not installed on the node"]


def _policy(
    h: RunnerHarness, netns: Namespace, rendezvous: int, open_ports: list[int] | None = None
) -> dict[str, Any]:
    fence_dir = str(h.root / "fence")
    return {
        "nft": NFT,
        "dir": fence_dir,
        "table": fence.table_name(fence_dir),
        "platform_uids": [0],
        "open_ports": open_ports or [],
        "closed_ranges": [],
        "rendezvous": [rendezvous],
        "peers": ["127.0.0.1"],
        "netns": netns.path,
    }


def _write_gang_task(h: RunnerHarness, policy: dict[str, Any], release: Path | None) -> None:
    """A task of a gang (under ``nobody``) that runs until ``release`` exists."""
    wait = f"while [ ! -e {release} ]; do sleep 0.05; done" if release else "echo ran"
    h.write_spec(["/bin/sh", "-c", wait], account=nobody(), fence=policy)


def _fork_connect(port: int, uid: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 2
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        code = 0
    except ConnectionRefusedError:
        code = 1
    finally:
        os._exit(code)


def _enter_new_network_namespace() -> None:
    """unshare(CLONE_NEWNET) for the calling thread alone (and what it starts)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
