"""Fast moves into cgroups (``executors.moves``): a root node's executor holds a cgroup
hierarchy with ``favordynmods`` in a namespace of its holder's own, for as long as it runs,
and not a moment longer, even killed with -9; the node's own mounts are left as they are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gpupool.executors.isolation import Isolation
from gpupool.executors.local import MOVES_DIR, LocalExecutor
from gpupool.executors.moves import HIERARCHY, FastMoves
from gpupool.settings import Settings
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a hierarchy needs root")


def mounts(pid: int | str = "self") -> str:
    return Path(f"/proc/{pid}/mountinfo").read_text()


def holders(directory: Path) -> list[int]:
    """The processes that see the hierarchy mounted at ``directory``: its holder alone."""
    found = []
    for pid in psutil.pids():
        try:
            seen = mounts(pid)
        except OSError:  # gone meanwhile
            continue
        if any(f" {directory} " in line and HIERARCHY in line for line in seen.splitlines()):
            found.append(pid)
    return found


def test_the_hierarchy_is_held_in_the_holders_namespace_alone_until_closed(
    tmp_path: Path,
) -> None:
    moves, why = FastMoves.hold(tmp_path / "moves")
    assert moves is not None, why
    try:
        assert holders(tmp_path / "moves") == [moves.holder.pid]
        theirs = mounts(moves.holder.pid)
        assert f"name={HIERARCHY}" in theirs and "favordynmods" in theirs
        assert HIERARCHY not in mounts(), "the node's own mount table is left as it is"
        assert f"name={HIERARCHY}:/" in Path("/proc/self/cgroup").read_text()
    finally:
        moves.close()
    assert moves.holder.returncode == 0
    assert not holders(tmp_path / "moves")


def test_the_holder_ends_with_an_executor_killed_with_9(tmp_path: Path) -> None:
    directory = tmp_path / "moves"
    script = (
        "import sys, time\nfrom pathlib import Path\n"
        "from gpupool.executors.moves import FastMoves\n"
        "moves, why = FastMoves.hold(Path(sys.argv[1]))\n"
        "print(moves.holder.pid if moves else why, flush=True)\ntime.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script, str(directory)], stdout=subprocess.PIPE)
    try:
        said = owner.stdout.readline().decode().strip()  # type: ignore[union-attr]
        assert said.isdigit(), said
        assert holders(directory) == [int(said)]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    wait_for(lambda: not holders(directory), 10, "the holder to end with its executor")


@pytest.mark.parametrize("fast", [True, False])
def test_a_nodes_executor_holds_it_unless_the_setting_is_off(tmp_path: Path, fast: bool) -> None:
    settings = Settings(data_dir=tmp_path / "data", cgroup_fast_moves=fast)
    executor = LocalExecutor(tmp_path / "jobs", isolation=Isolation(settings))
    try:
        assert bool(holders(tmp_path / "jobs" / MOVES_DIR)) == fast
    finally:
        executor.close()
    assert not holders(tmp_path / "jobs" / MOVES_DIR)
