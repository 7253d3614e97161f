"""An attempt's cgroup: its task limit, its views for the sandbox, its removal, and the
node's leftovers. cgroup v1 for real where the tests run as root on a v1 host; v2's files
in a directory laid out as its root (a real v2 tree needs a host booted with it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpupool.runner import cgroups
from gpupool.runner.sandbox import bwrap_argv
from gpupool.runner.wire import SandboxPolicy

GIB = 1024**3
NAME = f"job-7-attempt-1-{os.getpid():010d}"  # a name of its own for each test process


@pytest.fixture
def v2_root(tmp_path: Path) -> Path:
    """A stand-in v2 root whose controllers are on, with the files the kernel would make."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "gpupool" / NAME).mkdir(parents=True)
    (tmp_path / "gpupool" / NAME / "pids.max").write_text("max\n")
    return tmp_path


def real_v1() -> None:
    if os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/pids/"):
        pytest.skip("needs root and a cgroup v1 pids hierarchy (CI has both)")
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        pytest.skip("this host runs cgroup v2")


def test_v2_gets_a_task_limit_and_the_pids_controller(v2_root: Path) -> None:
    made, why = cgroups.create(NAME, None, 2 * GIB, 4096, root=str(v2_root))
    assert why == "" and made is not None and made.pids_dir == str(v2_root / "gpupool" / NAME)
    assert (v2_root / "gpupool" / NAME / "pids.max").read_text() == "4096"
    assert (v2_root / "gpupool" / "cgroup.subtree_control").read_text() == ("+memory +cpu +pids")
    (v2_root / "gpupool" / NAME / "pids.events").write_text("max 12\n")
    assert made.pids_refused() == 12
    assert made.views(str(v2_root)) == [(str(v2_root / "gpupool" / NAME), "/sys/fs/cgroup")]


def test_a_recorded_cgroup_keeps_its_pids_directory(v2_root: Path) -> None:
    made, _ = cgroups.create(NAME, None, GIB, 64, root=str(v2_root))
    assert made is not None
    again = cgroups.from_json(made.as_json())
    assert again is not None and again.pids_dir == made.pids_dir
    old = {"version": 2, "dirs": made.dirs, "memory_dir": made.memory_dir}  # before pids
    assert cgroups.from_json(old).pids_refused() == 0  # type: ignore[union-attr]


def test_leftovers_are_the_attempt_cgroups_under_gpupools_parent(v2_root: Path) -> None:
    (v2_root / "gpupool" / "not-a-job").mkdir()
    (v2_root / "other-job-1-attempt-1-abc").mkdir()
    assert cgroups.leftovers(str(v2_root)) == [str(v2_root / "gpupool" / NAME)]


def test_v1_holds_a_fork_bomb_to_its_task_limit_and_counts_the_refusals() -> None:
    real_v1()
    made, why = cgroups.create(NAME, None, None, 8)
    assert made is not None, why
    try:
        assert Path(made.pids_dir or "", "pids.max").read_text().strip() == "8"
        views = made.views()
        assert views == [(made.pids_dir, "/sys/fs/cgroup/pids")]
        # the program joins the cgroup itself before it forks (no preexec_fn: the test's
        # process has threads, and a preexec_fn can fail or hang there)
        join = (
            f"for d in {made.dirs!r}:\n    open(d + '/cgroup.procs', 'w').write(str(os.getpid()))\n"
        )
        bomb = (
            "import os, time\n"
            + join
            + "for _ in range(20):\n    os.fork() == 0 and time.sleep(30)\n"
        )
        proc = subprocess.Popen([sys.executable, "-c", bomb])
        proc.wait(timeout=30)
        assert made.pids_refused() > 0
        assert len(made.processes()) <= 8
    finally:
        made.close()
    assert not any(os.path.exists(d) for d in made.dirs), "killed what lingered, then removed"


def test_v1_leftovers_are_found_in_each_hierarchy() -> None:
    real_v1()
    made, why = cgroups.create(NAME, 1.0, 64 * 1024**2, 16)
    assert made is not None, why
    try:
        assert set(made.dirs) <= set(cgroups.leftovers())
        assert len(made.dirs) == 3  # memory, cpu, pids
    finally:
        made.close()
    assert not set(made.dirs) & set(cgroups.leftovers())


def test_close_waits_for_killed_processes_to_leave() -> None:
    real_v1()
    made, why = cgroups.create(NAME, None, 64 * 1024**2, 16)
    assert made is not None, why
    # a process that left its group (setsid) stays in the cgroup after the job's end
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    made.join(proc.pid)  # it forks nothing: joining it once started holds it all the same
    deadline = time.monotonic() + 10
    while proc.pid not in made.processes() and time.monotonic() < deadline:
        time.sleep(0.01)
    made.close()
    assert proc.wait(timeout=10) < 0
    assert not any(os.path.exists(d) for d in made.dirs)


def test_the_sandbox_covers_the_hosts_cgroups_and_shows_the_jobs_own() -> None:
    policy = SandboxPolicy({"bwrap": "/usr/bin/bwrap", "readonly": ["/usr", "/sys"]})
    own = ("/sys/fs/cgroup/pids/job-7-attempt-1-0123456789", "/sys/fs/cgroup/pids")
    argv = bwrap_argv(policy, ["true"], "/", [], None, 3, 4, cgroup_views=[own])
    host_sys = argv.index("/sys")
    cover = argv.index("--tmpfs", host_sys)
    assert argv[cover + 1] == "/sys/fs/cgroup", "the host's tree is covered, after /sys"
    assert argv[cover + 2 : cover + 5] == ["--ro-bind", *own]
    assert argv[cover + 5 : cover + 7] == ["--remount-ro", "/sys/fs/cgroup"]
