"""A job's network namespace may serve the next job of the same Unix account (issue 24:
pasta's set-up is paid once for a stream of one user's jobs); another team's job never starts
in one a team's job used, even one left empty.

A real server as root (each user's jobs under an account of their own), started inside a
network namespace this test makes, with a route out (``tests.support.outside``): there pasta
attaches, and the server keeps namespaces warm.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.security.conftest import FINAL, GPUS, Pool, _remove_account, stand_in_devices
from tests.support.outside import outside_world
from tests.support.server import ServerProcess

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="jobs under their own accounts: root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is missing"),
    pytest.mark.skipif(shutil.which("pasta") is None, reason="pasta (Debian's passt) is missing"),
]

SAY = "import os; print('ran as', os.getuid(), flush=True)"  # which account it ran under


def test_hostile_another_teams_job_never_starts_in_a_namespace_a_team_used() -> None:
    with outside_world() as world:
        warm = world.call(_three_jobs)
    a_first, b_only, a_again = warm
    assert b_only not in (a_first, a_again), warm
    assert a_again == a_first, "team A's next job reuses its own namespace"


def _three_jobs() -> list[str]:
    """Team A's job, then team B's, then team A's again, each to its end: the name of the
    namespace each ran in."""
    base = Path(tempfile.mkdtemp(prefix="gpupool-reuse-", dir="/tmp"))
    base.chmod(0o755)
    home, data = base / "home", base / "data"
    home.mkdir()
    data.mkdir(mode=0o700)
    env = {
        "HOME": str(home),
        "GPUPOOL_DEVICE_DIR": str(stand_in_devices(base / "dev")),
        "GPUPOOL_CREATE_UNIX_USERS": "true",
    }
    server = ServerProcess(data, gpus=GPUS, env=env).start()
    pool = Pool(server, home, Path(env["GPUPOOL_DEVICE_DIR"]), as_root=True)
    try:
        _, team_a = pool.member("teama")
        _, team_b = pool.member("teamb")
        names, uids = [], []
        for client in (team_a, team_b, team_a):
            job = pool.submit(client, [sys.executable, "-c", SAY])
            ended = pool.wait(job["id"], FINAL)
            assert ended["status"] == "succeeded", (ended, pool.log(job["id"]))
            state = pool.state(job["id"])
            assert not state.get("notes"), state  # egress was there: pasta attached
            names.append(state["network"]["warm"])
            uids.append(pool.log(job["id"]).split("ran as")[-1].split()[0])
        assert uids[0] == uids[2] != uids[1], uids  # the two teams' accounts differ
        return names
    finally:
        server.stop()
        for name in pool.accounts:
            _remove_account(name)
        shutil.rmtree(base, ignore_errors=True)
