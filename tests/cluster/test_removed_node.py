"""A node an admin removed stays out of the pool while its joiner keeps running, even when
that joiner joins a restarted head again; a new ``gpupool node join`` of its name is refused,
saying how to let it back; ``gpupool node undrain`` lets it back, and it joins at once."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Cli, wait_for
from tests.support.pool import Pool, kill_recorded, need_loopback_namespace

KEPT_OUT = "node n1 runs, but an admin removed it"


@pytest.fixture
def own_pool(tmp_path: Path) -> Iterator[Pool]:
    need_loopback_namespace()
    pool = Pool.start(tmp_path)
    try:
        pool.join("n1", "2xH100-SXM5-80GB:80GiB", timeout=300)
        yield pool
    finally:
        pool.stop()


def test_a_removed_node_stays_out_after_a_head_restart_until_an_admin_lets_it_back(
    own_pool: Pool, tmp_path: Path
) -> None:
    cli = Cli(own_pool.server.url, own_pool.server.token)
    cli.ok("node", "remove", "n1")
    assert listed(cli, "n1") is None
    wait_for(lambda: kept_out(own_pool) == 1, 60, "the server to keep n1's Ray node out")
    joiner = own_pool.nodes["n1"]

    kill_recorded(own_pool.server.data_dir / "cluster" / "head.json")  # the server starts it
    wait_for(lambda: "joined the head at" in joiner.output.read_text(), 240, "n1's rejoin")
    wait_for(lambda: kept_out(own_pool) == 2, 60, "the server to keep n1's new Ray node out")
    assert listed(cli, "n1") is None
    assert joiner.process.poll() is None

    again = join_again(own_pool, tmp_path / "n1-again")
    assert again.returncode == 2, again.stderr
    assert "node 'n1' was removed from the pool" in again.stderr
    assert "gpupool node undrain n1" in again.stderr

    cli.ok("node", "undrain", "n1")
    node = wait_for(lambda: schedulable(cli, "n1"), 120, "n1 to be let back")
    assert node["state"] == "up" and not node["drain"]


def kept_out(pool: Pool) -> int:
    """How many Ray nodes of n1 the server has kept out (it says so once for each)."""
    return pool.server.output().count(KEPT_OUT)


def listed(cli: Cli, name: str) -> dict | None:
    return next((n for n in cli.json("nodes") if n["name"] == name), None)


def schedulable(cli: Cli, name: str) -> dict | None:
    node = listed(cli, name)
    return node if node is not None and node["schedulable"] else None


def join_again(pool: Pool, data_dir: Path) -> subprocess.CompletedProcess:
    """A second ``gpupool node join`` under the removed node's name."""
    command = [sys.executable, "-m", "gpupool", "node", "join", pool.server.url]
    command += ["--token", pool.join_token, "--name", "n1", "--data-dir", str(data_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)
