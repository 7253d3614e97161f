"""The runner builds a job's Python environment on its node the first time, then shows it
read-only with its python first on PATH: once per node (a second attempt, or a second job, finds
it), a half-made one rebuilt, a build that fails or is stopped recorded as such, unsandboxed and
in the sandbox (as root: no capability inside; else: in a user namespace)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import sys
from pathlib import Path

from runner_harness import RunnerHarness, wait_for
from tests.support.wheels import lock_line, make_wheel

from gpupool.executors.environments import uv_binary
from gpupool.runner import envbuild

PROBE = "import sys, alpha; print('alpha', alpha.__version__, sys.prefix)"


def environment(h: RunnerHarness, lock: str, name: str = "tools") -> dict:
    hexa = hashlib.sha256((lock + str(h.root)).encode()).hexdigest()
    envs = h.root / "envs"
    wheels = h.root / "wheels"
    return {
        "id": f"sha256:{hexa}",
        "name": name,
        "dir": str(envs / hexa),
        "lock": lock,
        "python": os.path.realpath(sys.executable),
        "python_version": f"{sys.version_info.major}.{sys.version_info.minor}",
        "uv": uv_binary(),
        "cache": str(envs / ".uv-cache"),
        "index": ["--no-index", "--find-links", str(wheels), "--no-build"],
        "uv_env": {"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"},
        "shown": [str(Path(sys.base_prefix).resolve()), str(wheels)],
        "timeout": 120,
    }


def alpha_lock(h: RunnerHarness, version: str = "2.0") -> str:
    return lock_line(make_wheel(h.root / "wheels", "alpha", version))


def next_attempt(h: RunnerHarness, number: int) -> None:
    h.dir = h.root / "attempts" / str(number)


def test_it_is_built_once_then_shown_read_only(harness: RunnerHarness) -> None:
    env = environment(harness, alpha_lock(harness))
    harness.write_spec(["python", "-c", PROBE], environment=env)
    harness.run()
    assert harness.state()["exit_code"] == 0, harness.log()
    assert f"alpha 2.0 {env['dir']}" in harness.log()
    assert "environment tools@" in harness.log() and "built on this node" in harness.log()
    marker = envbuild.built(env["dir"])
    assert marker is not None and marker["id"] == env["id"]
    # its files and their bytecode are hard links into the node's caches, not copies
    site = next(Path(env["dir"]).glob("lib/python3*/site-packages"))
    source = site / "alpha" / "__init__.py"
    compiled = next((site / "alpha" / "__pycache__").glob("__init__.*.pyc"))
    assert source.stat().st_nlink >= 2 and compiled.stat().st_nlink >= 2
    for path in Path(env["dir"]).rglob("*"):
        if not path.is_symlink():
            assert not path.stat().st_mode & 0o222, path

    next_attempt(harness, 2)
    harness.write_spec(["python", "-c", PROBE + "; open(alpha.__file__, 'a')"], environment=env)
    harness.run()
    assert "built on this node" not in harness.log()  # found, not built again
    assert f"alpha 2.0 {env['dir']}" in harness.log()
    if harness.sandboxed:  # unsandboxed, a job is as free as its account (root ignores modes)
        assert harness.state()["exit_code"] == 1
        assert "Read-only file system" in harness.log() or "Permission denied" in harness.log()


def test_a_half_made_environment_is_built_again(harness: RunnerHarness) -> None:
    env = environment(harness, alpha_lock(harness))
    half = Path(env["dir"])
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "python").write_text("left by a build that was killed")
    harness.write_spec(["python", "-c", PROBE], environment=env)
    harness.run()
    assert harness.state()["exit_code"] == 0, harness.log()
    assert "built on this node" in harness.log()


def test_a_build_that_fails_ends_the_attempt_with_uvs_words(harness: RunnerHarness) -> None:
    wrong = alpha_lock(harness).replace("--hash=sha256:", "--hash=sha256:0")[:-2] + "\n"
    env = environment(harness, wrong, name="broken")
    harness.write_spec(["python", "-c", PROBE], environment=env)
    harness.run()
    state = harness.state()
    assert state["exit_code"] == 125
    assert state["message"].startswith("environment broken@")
    assert "could not be built on this node: uv failed" in state["message"]
    assert "hash" in state["message"].lower()
    assert envbuild.built(env["dir"]) is None


def test_a_stop_while_it_waits_for_another_build_ends_it(harness: RunnerHarness) -> None:
    env = environment(harness, alpha_lock(harness))
    locks = Path(env["dir"]).parent / ".locks"
    locks.mkdir(parents=True)
    held = os.open(locks / Path(env["dir"]).name, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # another job's runner builds it
    try:
        harness.write_spec(["python", "-c", PROBE], environment=env)
        proc = harness.spawn()
        progress = harness.dir / "progress"
        wait_for(progress.exists, 30, "the runner to say it waits")
        assert "waiting for environment tools@" in progress.read_text()
        proc.send_signal(signal.SIGTERM)
        assert harness.wait_for_exit(proc) == 0
    finally:
        os.close(held)
    state = harness.state()
    assert state["exit_code"] == 128 + signal.SIGTERM
    assert state["message"] == "stopped while its environment was being built"
    assert not progress.exists()


def test_its_job_holds_it_so_no_collection_removes_it_meanwhile(harness: RunnerHarness) -> None:
    env = environment(harness, alpha_lock(harness))
    release = harness.work / "release"
    wait = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"
    harness.write_spec(["python", "-c", wait], environment=env, workdir=str(harness.work))
    proc = harness.spawn()
    lock = Path(env["dir"]).parent / ".locks" / Path(env["dir"]).name
    wait_for(lambda: harness.dir.joinpath("state.json").exists(), 60, "the job to start")
    probe = os.open(lock, os.O_RDWR)
    try:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        assert held, "a collection could take the environment of a running job"
        release.touch()
        assert harness.wait_for_exit(proc) == 0
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the job ended
    finally:
        os.close(probe)
    assert harness.state()["exit_code"] == 0, harness.log()
