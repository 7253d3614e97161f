"""What a job was given is all it gets: its GPUs' device nodes only, its share of GPU memory
(a stand-in for NVML here; the real one on a GPU machine), its host memory; and what it was
not given a limit for is held to the node's defaults (tasks, host memory), in a cgroup that
shows no other job and does not outlive it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.runner import cgroups
from gpupool.runner.sandbox import members
from gpupool.runner.wire import cgroup_name
from tests.security.conftest import GPUS, Pool, _remove_account, stand_in_devices
from tests.support.cli import Cli
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

GIB = 1024**3
HOLD = (
    "import os, sys, time\n"
    "nodes = sorted(n for n in os.listdir('/dev') if n.startswith('nvidia'))\n"
    "print('NODES=' + ','.join(nodes), flush=True)\n"
    "print('VISIBLE=' + os.environ.get('CUDA_VISIBLE_DEVICES', ''), flush=True)\n"
    "while not os.path.exists('release'):\n"
    "    time.sleep(0.05)\n"
)


def line(log: str, key: str) -> str:
    return next(x for x in log.splitlines() if x.startswith(key + "="))[len(key) + 1 :]


def test_each_job_sees_only_the_device_node_of_its_gpu(pool: Pool, exchange: Path) -> None:
    _, client = pool.member("team-a")
    jobs = [
        pool.submit(
            client, [sys.executable, "-c", HOLD], resources={"gpus": 1}, workdir=str(exchange)
        )
        for _ in range(4)
    ]
    for job in jobs:
        wait_for(lambda job=job: "NODES=" in pool.log(job["id"]), 60, "each job to look")
    seen = [line(pool.log(job["id"]), "NODES").split(",") for job in jobs]
    (exchange / "release").touch()
    gpus = [[n for n in nodes if n[6:].isdigit()] for nodes in seen]
    assert all(len(found) == 1 for found in gpus), seen
    assert sorted(found[0] for found in gpus) == ["nvidia0", "nvidia1", "nvidia2", "nvidia3"]
    assert all({"nvidiactl", "nvidia-uvm"} <= set(nodes) for nodes in seen)
    for job in jobs:
        assert pool.wait(job["id"], {"succeeded", "failed"})["status"] == "succeeded"


def test_a_cpu_job_sees_no_gpu_device(pool: Pool, exchange: Path) -> None:
    _, client = pool.member("team-a")
    job = pool.submit(client, [sys.executable, "-c", HOLD], workdir=str(exchange))
    wait_for(lambda: "NODES=" in pool.log(job["id"]), 60, "the job to look")
    (exchange / "release").touch()
    assert line(pool.log(job["id"]), "NODES") == ""


def test_a_fraction_over_its_gpu_memory_share_is_stopped(pool: Pool, exchange: Path) -> None:
    _, client = pool.member("team-a")
    job = pool.submit(
        client, [sys.executable, "-c", HOLD], resources={"gpus": 0.25}, workdir=str(exchange)
    )
    wait_for(lambda: "NODES=" in pool.log(job["id"]), 60, "the job to run")
    uuid = json.loads((pool.attempt_dir(job["id"]) / "spec.json").read_text())["gpu_uuids"][0]
    pid = _job_pid(pool, job["id"])
    samples = pool.home.parent / "nvml.json"
    samples.write_text(json.dumps({uuid: {str(pid): 15 * GIB}}))  # under its 20 GiB share
    time.sleep(2.5)  # longer than the grace: nothing happens to a job within its share
    assert pool.job(job["id"])["status"] == "running"

    samples.write_text(json.dumps({uuid: {str(pid): 30 * GIB}}))
    ended = pool.wait(job["id"], {"succeeded", "failed", "lost"})
    assert (ended["status"], ended["reason"]) == ("failed", "GpuMemoryExceeded"), ended
    assert "used 30.0 GiB of GPU memory" in ended["message"]
    assert "over its share of 20.0 GiB" in ended["message"]
    assert "GpuMemoryExceeded" in [e["reason"] for e in ended["events"]]


def test_host_memory_is_held_to_the_request_or_said_not_to_be(pool: Pool) -> None:
    _, client = pool.member("team-a")
    grab = "b = bytearray(256 * 2**20); b[::4096] = b'x' * (len(b) // 4096); print('survived')"
    job = pool.submit(client, [sys.executable, "-c", grab], resources={"memory_bytes": "96MiB"})
    ended = pool.wait(job["id"], {"succeeded", "failed", "lost"})
    if pool.as_root:  # cgroups: the kernel kills it at its limit
        assert (ended["status"], ended["reason"]) == ("failed", "MemoryExceeded"), ended
        assert "ran out of its 96 MiB of host memory" in ended["message"]
    else:  # no cgroup to write: it runs, and its events say the limit is not enforced
        notes = [e["message"] for e in ended["events"] if e["reason"] == "LimitsNotEnforced"]
        assert notes and "not enforced" in notes[0], ended["events"]


def _job_pid(pool: Pool, job_id: int) -> int:
    """A host PID of the job's own process (its sandbox's, but the init)."""
    sandbox = wait_for(lambda: pool.state(job_id).get("sandbox"), 30, "the sandbox's record")
    return next(p for p in members(sandbox["pid_namespace"]) if p != sandbox["init_pid"])


# -- limits on by default -------------------------------------------------------------------

# Forks children that sleep, up to 200 (a bounded fork bomb: without a task limit it gets
# them all and waits, which a test can see without taking the machine down).
BOMB = (
    "import os, time\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(120)\n"
    "            os._exit(0)\n"
    "    except OSError:\n"
    "        time.sleep(0.01)\n"
    "print('bombed', flush=True)\n"
    "time.sleep(120)\n"
)
# Lists every cgroup directory named for a job below /sys/fs/cgroup, and its own limits.
LOOK = (
    "import os, re\n"
    "found = []\n"
    "for top, dirs, _ in os.walk('/sys/fs/cgroup'):\n"
    "    found += [d for d in dirs if re.match(r'job-\\d+-attempt-', d)]\n"
    "    dirs[:] = dirs if top.count('/') < 8 else []\n"
    "print('JOBS=' + ','.join(found), flush=True)\n"
    "def read(*names):\n"
    "    for name in names:\n"
    "        if os.path.exists(name):\n"
    "            return open(name).read().strip()\n"
    "    return ''\n"
    "print('PIDS=' + read('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max'), flush=True)\n"
    "print('MEMORY=' + read('/sys/fs/cgroup/memory/memory.limit_in_bytes',"
    " '/sys/fs/cgroup/memory.max'), flush=True)\n"
    "moves = [m for m in open('/proc/self/mountinfo') if 'gpupool-moves' in m]\n"
    "print('MOVES=' + str(len(moves)), flush=True)\n"
)


@pytest.fixture
def limited() -> Iterator[Pool]:
    """A root server whose node declares 2 GiB over 4 GPUs (a job's default memory: 512 MiB)
    and whose jobs may hold 64 tasks each."""
    with _limits_pool(64) as found:
        yield found


@pytest.fixture
def capped() -> Iterator[Pool]:
    """As ``limited``, but whose jobs may hold up to 256 tasks each."""
    with _limits_pool(256) as found:
        yield found


@contextlib.contextmanager
def _limits_pool(pids_max: int) -> Iterator[Pool]:
    if shutil.which("bwrap") is None or os.geteuid() != 0:
        pytest.skip("limits are enforced by a root server with bubblewrap (CI has both)")
    base = Path(tempfile.mkdtemp(prefix="gpupool-sec-", dir="/tmp"))
    base.chmod(0o755)
    home, data = base / "home", base / "data"
    home.mkdir()
    data.mkdir(mode=0o700)
    env = {
        "HOME": str(home),
        "GPUPOOL_DEVICE_DIR": str(stand_in_devices(base / "dev")),
        "GPUPOOL_CREATE_UNIX_USERS": "true",
        "GPUPOOL_DECLARED_MEMORY": "2GiB",
        "GPUPOOL_JOB_PIDS_MAX": str(pids_max),
    }
    server = ServerProcess(data, gpus=GPUS, env=env).start()
    found = Pool(server, home, base / "dev", as_root=True)
    try:
        yield found
    finally:
        server.stop()
        for name in found.accounts:
            _remove_account(name)
        shutil.rmtree(base, ignore_errors=True)


def test_a_fork_bomb_ends_at_its_task_limit_and_another_team_runs_on(
    limited: Pool, exchange: Path
) -> None:
    _, team_a = limited.member("team-a")
    _, team_b = limited.member("team-b")
    victim = limited.submit(team_a, [sys.executable, "-c", HOLD], workdir=str(exchange))
    wait_for(lambda: "NODES=" in limited.log(victim["id"]), 60, "team A's job to run")
    bomb = limited.submit(team_b, [sys.executable, "-c", BOMB])
    ended = limited.wait(bomb["id"], {"succeeded", "failed", "lost"})
    assert (ended["status"], ended["reason"]) == ("failed", "PidsExceeded"), ended
    assert "reached its limit of 64 tasks" in ended["message"]
    assert "PidsExceeded" in [e["reason"] for e in ended["events"]]
    assert "bombed" not in limited.log(bomb["id"])
    assert _cgroup_gone(limited, bomb["id"])
    assert limited.job(victim["id"])["status"] == "running"
    (exchange / "release").touch()
    assert limited.wait(victim["id"], {"succeeded", "failed"})["status"] == "succeeded"
    assert _cgroup_gone(limited, victim["id"])


def test_a_job_asks_for_its_own_task_limit_under_the_nodes(capped: Pool, exchange: Path) -> None:
    """gpupool run --pids 64 on a node that allows 256: the fork bomb ends at 64 tasks
    (PidsExceeded); asking for more than the node allows is refused, naming its limit."""
    _, team_b = capped.member("team-b")
    cli = Cli(capped.server.url, team_b.headers["Authorization"].removeprefix("Bearer "))
    over = cli("run", "--pids", "300", "--workdir", str(exchange), "--", "true")
    assert over.returncode != 0, over.stdout
    said = " ".join(over.stderr.split())
    assert "invalid_request" in said and "at most 256 tasks" in said, said
    assert "GPUPOOL_JOB_PIDS_MAX" in said
    printed = cli(
        "run", "--pids", "64", "--workdir", str(exchange), "--", sys.executable, "-c", BOMB
    )
    assert printed.returncode == 0, printed.stderr
    job_id = int(printed.stdout.strip())
    ended = capped.wait(job_id, {"succeeded", "failed", "lost"})
    assert (ended["status"], ended["reason"]) == ("failed", "PidsExceeded"), ended
    assert "reached its limit of 64 tasks" in ended["message"], ended["message"]
    assert (
        json.loads((capped.attempt_dir(job_id) / "spec.json").read_text())["limits"]["pids_max"]
        == 64
    )
    assert "bombed" not in capped.log(job_id)


def test_a_job_without_memory_is_held_to_the_nodes_default(limited: Pool) -> None:
    _, client = limited.member("team-a")
    grab = "b = bytearray(768 * 2**20); b[::4096] = b'x' * (len(b) // 4096); print('survived')"
    job = limited.submit(client, [sys.executable, "-c", grab])
    ended = limited.wait(job["id"], {"succeeded", "failed", "lost"})
    spec = json.loads((limited.attempt_dir(job["id"]) / "spec.json").read_text())
    assert spec["limits"]["memory_bytes"] == 512 * 2**20  # 2 GiB over 4 GPUs
    assert (ended["status"], ended["reason"]) == ("failed", "MemoryExceeded"), ended
    assert "ran out of its 512 MiB of host memory" in ended["message"]
    assert _cgroup_gone(limited, job["id"])


def test_a_job_sees_its_own_cgroup_and_no_other_jobs(pool: Pool, exchange: Path) -> None:
    _, team_a = pool.member("team-a")
    _, team_b = pool.member("team-b")
    victim = pool.submit(
        team_a,
        [sys.executable, "-c", HOLD],
        workdir=str(exchange),
        resources={"memory_bytes": "1GiB"},
    )
    wait_for(lambda: "NODES=" in pool.log(victim["id"]), 60, "team A's job to run")
    looker = pool.submit(team_b, [sys.executable, "-c", LOOK])
    ended = pool.wait(looker["id"], {"succeeded", "failed", "lost"})
    (exchange / "release").touch()
    assert ended["status"] == "succeeded", pool.log(looker["id"])
    log = pool.log(looker["id"])
    assert line(log, "JOBS") == "", "it saw other jobs' cgroups"
    assert line(log, "MOVES") == "0", "it saw the node's fast-moves hierarchy mounted"
    if pool.as_root:  # its own limits, where a container's are: 4,096 tasks, 256 GiB / 4 GPUs
        assert line(log, "PIDS") == "4096"
        assert int(line(log, "MEMORY")) == 64 * GIB
    assert pool.wait(victim["id"], {"succeeded", "failed"})["status"] == "succeeded"


def test_cgroups_left_by_killed_runners_are_swept_at_start(limited: Pool) -> None:
    jobs = limited.server.data_dir / "jobs"
    own = cgroup_name(42, 1, str(jobs / "42" / "outputs"))  # this node's, never to run again
    made = {
        name: cgroups.create(name, None, None, 16)[0]
        for name in (own, "job-42-attempt-1-0dd0dd0dd0", "job-43-attempt-1-feedfeedfe")
    }
    assert all(made.values())
    stale = made["job-42-attempt-1-0dd0dd0dd0"]
    for directory in stale.dirs:  # another server's, left long ago
        os.utime(directory, (time.time() - 3600, time.time() - 3600))
    limited.server.stop()
    limited.server.start()
    try:
        assert not any(os.path.exists(d) for d in made[own].dirs + stale.dirs)
        fresh = made[
            "job-43-attempt-1-feedfeedfe"
        ]  # another server's runner may be about to join it
        assert all(os.path.exists(d) for d in fresh.dirs)
    finally:
        for cgroup in made.values():
            cgroup.close()


def _cgroup_gone(pool: Pool, job_id: int) -> bool:
    dirs = pool.state(job_id)["cgroup"]["dirs"]
    return bool(dirs) and not any(os.path.exists(d) for d in dirs)
