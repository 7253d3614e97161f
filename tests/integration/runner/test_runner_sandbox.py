"""The job sandbox, seen from inside a real one: what a job sees, who it runs as, what it may
use, and how it is held to what it asked for."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from runner_harness import RunnerHarness, bwrap, py, wait_for

from gpupool.runner import cgroups
from gpupool.runner.sandbox import members

MIB = 1024**2
GIB = 1024**3
PROBE = """
import json, os
seen = {
    "uid": os.getuid(),
    "dev": sorted(os.listdir("/dev")),
    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "spec": os.path.exists(ATTEMPT + "/spec.json"),
    "attempts": os.path.exists(ATTEMPT),
    "tmp": sorted(os.listdir("/tmp")),
    "home": os.environ["HOME"],
    "cwd": os.getcwd(),
}
open("/tmp/made-inside", "w").write("x")
open(os.environ["GPUPOOL_OUTPUT_DIR"] + "/result", "w").write("r")
print("SEEN=" + json.dumps(seen), flush=True)
"""


@pytest.fixture
def sandbox() -> Iterator[RunnerHarness]:
    if bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    h = RunnerHarness(sandboxed=True)
    yield h
    h.cleanup()


def seen(harness: RunnerHarness) -> dict:
    line = next(x for x in harness.log().splitlines() if x.startswith("SEEN="))
    return json.loads(line[len("SEEN=") :])


def probe(harness: RunnerHarness) -> list[str]:
    return py(f"ATTEMPT = {str(harness.dir)!r}\n" + PROBE)


def test_a_job_sees_only_its_own_files_processes_and_tmp(sandbox: RunnerHarness) -> None:
    sandbox.write_spec(probe(sandbox))
    assert sandbox.run().returncode == 0
    assert sandbox.state()["exit_code"] == 0, sandbox.log()
    inside = seen(sandbox)
    assert not inside["spec"] and not inside["attempts"], "the runner's files are hidden"
    assert inside["procs"] == [1, 2], "its own PID namespace: bwrap's init and the job"
    # a private /tmp: it holds only the way to the job's own directories (and to this
    # Python, when the checkout running the tests lies below /tmp)
    shown = {Path(p).parts[2] for p in (sys.prefix, sys.base_prefix) if p.startswith("/tmp/")}
    assert set(inside["tmp"]) == {sandbox.root.name} | shown
    assert not os.path.exists("/tmp/made-inside")
    assert "nvidia0" not in inside["dev"] and "null" in inside["dev"]
    assert inside["home"] == "/tmp" and inside["cwd"] == str(sandbox.output_dir)
    result = sandbox.output_dir / "result"
    assert result.read_text() == "r"
    if os.geteuid() == 0:  # as root, the job runs as its account, never as root
        assert inside["uid"] == sandbox.write_spec(["true"])["account"]["uid"] != 0
        assert result.stat().st_uid == inside["uid"], "files a job writes are its account's"


def test_only_the_given_device_nodes_exist_inside(sandbox: RunnerHarness) -> None:
    devices = sandbox.root / "dev"
    devices.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (devices / name).write_text(name)
        (devices / name).chmod(0o666)
    policy = sandbox.write_spec(["true"])["sandbox"]
    given = [[str(devices / n), f"/dev/{n}"] for n in ("nvidia2", "nvidiactl", "nvidia-uvm")]
    code = "import os; print('DEV=' + ','.join(sorted(n for n in os.listdir('/dev') if 'nv' in n)))"
    sandbox.write_spec(py(code), sandbox=policy | {"devices": given}, gpu_uuids=["GPU-2"])
    sandbox.run()
    assert "DEV=nvidia-uvm,nvidia2,nvidiactl" in sandbox.log()


def test_the_environment_never_reaches_a_command_line_or_a_privileged_program(
    sandbox: RunnerHarness,
) -> None:
    secret = "s3cret-" + os.urandom(8).hex()
    code = (
        "import os, time\n"
        "print('VALUE=' + os.environ['TOKEN'], flush=True)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {"PATH": os.environ["PATH"], "TOKEN": secret, "LD_PRELOAD": "/nonexistent/evil.so"}
    sandbox.write_spec(py(code), env=env)
    proc = sandbox.spawn()
    sandbox.wait_for_log("ready\n")
    for other in psutil.process_iter(["cmdline"]):
        assert secret not in " ".join(other.info["cmdline"] or ()), other
    proc.send_signal(signal.SIGTERM)
    sandbox.wait_for_exit(proc)
    log = sandbox.log()
    assert f"VALUE={secret}" in log
    # Only the job's own program loads (and complains about) its LD_PRELOAD: not bwrap,
    # setpriv or the shell, which start privileged or before the job's environment is read.
    assert log.count("/nonexistent/evil.so") == 1, log


def test_a_command_outside_the_sandbox_is_127_with_what_to_do(sandbox: RunnerHarness) -> None:
    hidden = sandbox.root / "attempts" / "tool"
    hidden.parent.mkdir(parents=True, exist_ok=True)
    hidden.write_text("#!/bin/sh\necho hi\n")
    hidden.chmod(0o755)
    sandbox.write_spec([str(hidden)])
    sandbox.run()
    assert sandbox.state()["exit_code"] == 127
    assert "is not in the job's sandbox" in sandbox.log()
    assert "GPUPOOL_SANDBOX_READONLY_PATHS" in sandbox.log()


def test_a_workdir_in_the_protected_paths_is_refused(sandbox: RunnerHarness) -> None:
    sandbox.write_spec(py("print('ran')"), workdir=str(sandbox.dir.parent))
    sandbox.run()
    assert sandbox.state()["exit_code"] == 126
    assert "is in or above gpupool's own files" in sandbox.log()
    assert "\nran" not in sandbox.log()


def test_a_workdir_above_them_shows_them_empty(sandbox: RunnerHarness) -> None:
    code = "import os; print('HIDDEN=' + str(os.listdir('attempts')))"
    sandbox.write_spec(py(code), workdir=str(sandbox.root))
    sandbox.run()
    assert sandbox.state()["exit_code"] == 0, sandbox.log()
    assert "HIDDEN=[]" in sandbox.log()


def test_unsandboxed_a_workdir_above_them_is_refused() -> None:
    harness = RunnerHarness(sandboxed=False)
    try:
        harness.write_spec(py("print('ran')"), workdir=str(harness.root))
        harness.write_spec(
            py("print('ran')"), workdir=str(harness.root), protected=[str(harness.dir)]
        )
        harness.run()
        assert harness.state()["exit_code"] == 126
        assert "is in or above gpupool's own files" in harness.log()
    finally:
        harness.cleanup()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: jobs run under other accounts")
def test_a_workdir_its_account_cannot_read_is_refused(sandbox: RunnerHarness) -> None:
    private = sandbox.work / "private"
    private.mkdir(mode=0o700)  # root's alone; the bind would show it to the job otherwise
    (private / "inner").mkdir(mode=0o755)
    sandbox.write_spec(py("print('ran')"), workdir=str(private / "inner"))
    sandbox.run()
    assert sandbox.state()["exit_code"] == 126
    assert "is not readable by the Unix account nobody" in sandbox.log()


@pytest.mark.parametrize("mode", ["direct", "sandbox"])
def test_a_fraction_over_its_gpu_memory_share_is_stopped(mode: str) -> None:
    if mode == "sandbox" and bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    harness = RunnerHarness(sandboxed=mode == "sandbox")
    try:
        samples = harness.root / "nvml.json"
        gpu_memory = {"limits": {"GPU-a": GIB}, "sampler": f"file:{samples}", "grace_seconds": 1}
        code = "import time; print('ready', flush=True); time.sleep(600)"
        harness.write_spec(py(code), gpu_uuids=["GPU-a"], gpu_memory=gpu_memory)
        proc = harness.spawn()
        harness.wait_for_log("ready\n")
        job_pid = _job_pid(harness)
        other_pid = os.getpid()  # not the job's: never counted
        samples.write_text(json.dumps({"GPU-a": {str(job_pid): GIB // 2, str(other_pid): 9 * GIB}}))
        assert proc.poll() is None
        samples.write_text(json.dumps({"GPU-a": {str(job_pid): 3 * GIB}}))
        assert harness.wait_for_exit(proc, timeout=60) == 0
        state = harness.state()
        assert state["exceeded"]["reason"] == "GpuMemoryExceeded"
        assert (state["exceeded"]["used_bytes"], state["exceeded"]["limit_bytes"]) == (
            3 * GIB,
            GIB,
        )
        assert "used 3.0 GiB of GPU memory on GPU-a" in state["message"]
        assert "over its share of 1.0 GiB" in harness.log()
    finally:
        harness.cleanup()


def test_mps_limits_reach_a_fraction_when_a_control_daemon_runs(sandbox: RunnerHarness) -> None:
    pipes = sandbox.root / "mps"
    pipes.mkdir(mode=0o755)
    control = socket.socket(socket.AF_UNIX)
    control.bind(str(pipes / "control"))
    try:
        code = (
            "import os\n"
            "for k in sorted(os.environ):\n"
            "    if k.startswith('CUDA_MPS'): print(k + '=' + os.environ[k])\n"
            "pipes = os.environ['CUDA_MPS_PIPE_DIRECTORY']\n"
            "print('SEES=' + str(os.path.exists(pipes + '/control')))\n"
        )
        gpu_memory = {"limits": {"GPU-a": 20 * GIB}, "sampler": "file:/nonexistent"}
        sandbox.write_spec(
            py(code),
            gpu_uuids=["GPU-a"],
            gpu_shares={"GPU-a": 0.25},
            gpu_memory=gpu_memory,
            mps_pipe_dir=str(pipes),
        )
        sandbox.run()
        log = sandbox.log()
        assert f"CUDA_MPS_PIPE_DIRECTORY={pipes}" in log
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in log
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M" in log
        assert "SEES=True" in log
    finally:
        control.close()


def test_without_mps_no_mps_variables(sandbox: RunnerHarness) -> None:
    code = "import os; print('MPS=' + str([k for k in os.environ if k.startswith('CUDA_MPS')]))"
    sandbox.write_spec(py(code), gpu_uuids=["GPU-a"], mps_pipe_dir=str(sandbox.root / "none"))
    sandbox.run()
    assert "MPS=[]" in sandbox.log()


def _job_pid(harness: RunnerHarness) -> int:
    """The host PID of the job's process (in a sandbox: its namespace's, but the init)."""
    state = wait_for(lambda: harness.state() if harness.state().get("pid") else None)
    if not harness.sandboxed:
        return state["pid"]
    sandbox = wait_for(lambda: harness.state().get("sandbox"), what="the sandbox's namespace")
    return next(p for p in members(sandbox["pid_namespace"]) if p != sandbox["init_pid"])


@pytest.mark.parametrize("mode", ["direct", "sandbox"])
def test_a_job_over_its_memory_limit_is_killed_and_says_so(mode: str) -> None:
    probe_cgroup, why = cgroups.create("gpupool-test-probe", None, 64 * MIB)
    if probe_cgroup is None:
        pytest.skip(f"cgroup limits cannot be set here: {why}")
    probe_cgroup.remove()
    harness = RunnerHarness(sandboxed=mode == "sandbox")
    try:
        code = "b = bytearray(512 * 1024 * 1024); b[::4096] = b'x' * (len(b) // 4096)"
        harness.write_spec(py(code), limits={"memory_bytes": 64 * MIB, "cpus": 1})
        assert harness.run().returncode == 0
        state = harness.state()
        assert state["exit_code"] == 128 + signal.SIGKILL
        assert state["exceeded"]["reason"] == "MemoryExceeded"
        assert state["exceeded"]["limit_bytes"] == 64 * MIB
        assert "ran out of its 64 MiB of host memory" in harness.log()
        assert not any(os.path.exists(d) for d in state["cgroup"]["dirs"]), "cgroup removed"
    finally:
        harness.cleanup()


def test_limits_that_cannot_be_enforced_are_noted(sandbox: RunnerHarness) -> None:
    sandbox.write_spec(
        py("print('ran')"),
        gpu_uuids=["GPU-a"],
        gpu_memory={"limits": {"GPU-a": GIB}, "sampler": "nvml"},
        limits={"cpus": 1},
    )
    env = dict(os.environ, PYTHONPATH=str(sandbox.root / "no-nvml"))
    (sandbox.root / "no-nvml").mkdir()
    (sandbox.root / "no-nvml" / "pynvml.py").write_text("raise ImportError('no NVML here')")
    proc = sandbox.spawn(env=env)
    sandbox.wait_for_exit(proc)
    notes = sandbox.state().get("notes", [])
    assert any("the GPU memory share is not enforced" in note for note in notes), notes


SHM_SIZE = "import os; s = os.statvfs('/dev/shm'); print('SHM=%d' % (s.f_blocks * s.f_frsize))"


def test_the_dev_shm_is_the_size_the_job_asked_for(sandbox: RunnerHarness) -> None:
    policy = sandbox.write_spec(["true"])["sandbox"]
    sandbox.write_spec(py(SHM_SIZE), sandbox=policy | {"shm_bytes": 8 * MIB, "bwrap_size": True})
    sandbox.run()
    assert f"SHM={8 * MIB}" in sandbox.log()
    assert not sandbox.state().get("notes")


def test_without_a_size_the_dev_shm_is_tmpfs_s_default(sandbox: RunnerHarness) -> None:
    sandbox.write_spec(py(SHM_SIZE))
    sandbox.run()
    assert int(sandbox.log().split("SHM=")[1].split()[0]) > 8 * MIB  # half the memory


def test_a_dev_shm_size_the_nodes_bwrap_cannot_give_is_noted(sandbox: RunnerHarness) -> None:
    policy = sandbox.write_spec(["true"])["sandbox"]
    sandbox.write_spec(py(SHM_SIZE), sandbox=policy | {"shm_bytes": 8 * MIB, "bwrap_size": False})
    sandbox.run()
    assert sandbox.state()["exit_code"] == 0, sandbox.log()
    notes = sandbox.state().get("notes", [])
    assert any("the /dev/shm size (8388608 bytes) is not enforced" in n for n in notes), notes
