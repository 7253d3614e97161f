"""A real pool on one machine: ``gpupool server --ray`` and nodes joined with ``gpupool node join``,
every Ray process on 127.0.0.1.

Ray keeps to 127.0.0.1 only where loopback is the machine's one interface (it rewrites that
address to the machine's external one otherwise), so the pool runs only inside a network
namespace that holds only ``lo``: ``make test`` runs the tests in one, as root
(scripts/loopback-only). Elsewhere the pool's tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cleanup import kill_leftovers
from tests.support.server import ServerProcess, free_port

SCHEDULABLE = re.compile(r"schedulable after ([0-9.]+) s")
JOIN_TOKEN = re.compile(r"--token (gpj_\S+)")


def only_loopback() -> bool:
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def need_loopback_namespace() -> None:
    if not only_loopback():
        pytest.skip(
            "a Ray pool on one machine keeps to 127.0.0.1 only in a network namespace that "
            "holds only loopback: run the tests with scripts/loopback-only (make test does, "
            "as root)"
        )
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("Ray is not installed: make test installs it")


@dataclass
class JoinedNode:
    name: str
    data_dir: Path
    process: subprocess.Popen
    output: Path
    seconds: float | None = None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
        kill_recorded(self.data_dir / "cluster" / "node.json")
        kill_leftovers(self.data_dir / "jobs")


@dataclass
class Pool:
    """The server (its Ray head's machine is node ``head``) and the nodes that joined it."""

    root: Path
    server: ServerProcess
    nodes: dict[str, JoinedNode] = field(default_factory=dict)

    env: dict[str, str] = field(default_factory=dict)  # given to the server and every joiner

    @classmethod
    def start(
        cls, root: Path, head_gpus: str = "2xA100-SXM4-80GB:80GiB", env: dict | None = None
    ) -> Pool:
        env = {"GPUPOOL_NODE_NAME": "head", "GPUPOOL_NODE_LOST_SECONDS": "5", **(env or {})}
        server = ServerProcess(root / "server", gpus=head_gpus, env=env, args=["--ray"])
        # Ray's head and the server each need a port of their own: two free ports asked for
        # one after the other may be the same one (neither is held until its server binds it)
        ray_port = free_port()
        while ray_port == server.port:
            ray_port = free_port()
        env.setdefault("GPUPOOL_RAY_PORT", str(ray_port))
        server.extra_env = env
        pool = cls(root, server, env=env)
        try:
            server.start(timeout=120)
        except BaseException:
            pool.stop()  # a server that never said ready may still have started Ray's head
            raise
        return pool

    @property
    def join_token(self) -> str:
        return JOIN_TOKEN.findall(self.server.output())[0]

    def join(self, name: str, gpus: str, timeout: float = 120.0) -> JoinedNode:
        """``gpupool node join`` as a user runs it, until it says the node is schedulable."""
        data_dir = self.root / name
        output = self.root / f"{name}-join.log"
        command = [sys.executable, "-m", "gpupool", "node", "join", self.server.url]
        command += ["--token", self.join_token, "--name", name, "--data-dir", str(data_dir)]
        command += ["--declare-gpus", gpus, "--declare-cpus", "16", "--declare-memory", "64GiB"]
        with output.open("wb") as out:
            env = os.environ | {k: v for k, v in self.env.items() if not k.startswith("GPUPOOL_R")}
            env.pop("GPUPOOL_NODE_NAME", None)
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        node = self.nodes[name] = JoinedNode(name, data_dir, process, output)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = SCHEDULABLE.findall(output.read_text(errors="replace"))
            if found:
                node.seconds = float(found[0])
                return node
            if process.poll() is not None:
                raise RuntimeError(f"join of {name} ended: {output.read_text()}")
            time.sleep(0.2)
        raise RuntimeError(f"join of {name} did not finish: {output.read_text()}")

    def stop(self) -> None:
        # the nodes at once: each joiner takes seconds to leave Ray, and a session's last
        # test waits for its pool's teardown
        with ThreadPoolExecutor(max(1, len(self.nodes))) as stopping:
            list(stopping.map(JoinedNode.stop, self.nodes.values()))
        self.server.stop()
        kill_recorded(self.server.data_dir / "cluster" / "head.json")
        kill_leftovers(self.server.data_dir / "cluster" / "node" / "jobs")
        from gpupool.services.cluster._cluster import ray_temp_dir
        from gpupool.settings import Settings

        shutil.rmtree(ray_temp_dir(Settings(data_dir=self.server.data_dir)), ignore_errors=True)


def kill_recorded(record: Path) -> None:
    """Every process of the Ray node recorded at ``record`` (its session)."""
    try:
        leader = json.loads(record.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return
    import psutil

    from gpupool.cluster.process import kill_session

    killed = []
    for pid in kill_session(leader):
        with contextlib.suppress(psutil.Error):
            killed.append(psutil.Process(pid))
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(-1, os.WNOHANG)
    # gone before the caller removes their files: one still ending writes its session's
    # directories under Ray's temp dir again
    psutil.wait_procs(killed, timeout=10)
