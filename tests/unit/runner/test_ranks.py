"""The in-sandbox rank launcher (``python -m gpupool.runner.ranks PLAN.json``), run for real:
the launcher and its ranks are real processes (small ``python -c`` scripts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.domain.launchers import Gang, GangTask, Launcher, LauncherKind, MpiAgent, plan_launch
from gpupool.runner.layout import CODE_NOT_FOUND, CODE_RUNNER_ERROR
from tests.support import waiting

SRC = Path(__file__).resolve().parents[3] / "src"
WAIT = 60  # seconds a test waits for a process before it fails instead of hanging

# Each rank writes its lines one character at a time, so the two ranks' writes interleave.
CHATTY = """
import os
r = os.environ["RANK"]
for i in range(40):
    for ch in f"line {i} of rank {r}\\n":
        os.write(1, ch.encode())
os.write(2, f"warning from {r}\\n".encode())
os.write(1, b"50%\\r100%\\n")
os.write(1, f"tail {r}".encode())
"""
# Ready once its SIGTERM handler is in (tells its process group), then waits to be stopped.
STOPPABLE = """
import os, signal, sys, time
r = os.environ["RANK"]
def stop(signum, frame):
    print(f"rank {r} stopping", flush=True)
    sys.exit(int(os.environ.get("EXIT_ON_TERM", "0")))
if os.environ.get("HANDLE_TERM", "1") == "1":
    signal.signal(signal.SIGTERM, stop)
with open(f"ready-{r}.tmp", "w") as f:
    f.write(str(os.getpgid(0)))
os.rename(f"ready-{r}.tmp", f"ready-{r}")
time.sleep(600)
"""


def process(code: str, rank: int | None = 0, **env: str) -> dict[str, object]:
    """A ProcessSpec as the executor writes it (TaskLaunch.model_dump(mode="json"))."""
    env = {"RANK": str(rank), **env} if rank is not None else env
    argv = [sys.executable, "-c", code]
    return {"argv": argv, "env": env, "env_defaults": {}, "rank": rank, "local_rank": rank}


def plan_file(cwd: Path, processes: list[dict[str, object]], **extra: object) -> Path:
    plan = {"task_index": 0, "node": "n1", "processes": processes, "files": {}, **extra}
    path = cwd / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def start(cwd: Path, processes: list[dict[str, object]], **extra: object) -> subprocess.Popen:
    """The launcher, leading its own process group as under the runner."""
    plan = plan_file(cwd, processes, **extra)
    argv = [sys.executable, "-m", "gpupool.runner.ranks", str(plan)]
    return subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


def launch(cwd: Path, processes: list[dict[str, object]], **extra: object) -> tuple[int, str, str]:
    launcher = start(cwd, processes, **extra)
    out, err = launcher.communicate(timeout=WAIT)
    return launcher.returncode, out.decode(), err.decode()


def wait_for(path: Path) -> str:
    waiting.wait_for(path.exists, WAIT, f"{path.name} to appear", every=0.02)
    return path.read_text()


def test_two_ranks_lines_are_prefixed_and_whole(tmp_path: Path) -> None:
    code, out, _ = launch(tmp_path, [process(CHATTY, 0), process(CHATTY, 1)])
    assert code == 0
    assert out.endswith("\n")
    lines = out.splitlines()
    for r in (0, 1):
        mine = [line.removeprefix(f"[rank {r}] ") for line in lines if f"[rank {r}] " in line]
        expected = [f"line {i} of rank {r}" for i in range(40)]
        assert mine == [*expected, f"warning from {r}", "100%", f"tail {r}"]
    assert all(line.startswith(("[rank 0] ", "[rank 1] ")) for line in lines)


@pytest.mark.parametrize("count", [1, 2])
def test_env_goes_over_the_jobs_and_defaults_fill_what_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    monkeypatch.setenv("FOO", "job")
    monkeypatch.setenv("BAR", "job")
    monkeypatch.delenv("BAZ", raising=False)
    show = "import os; print(os.environ['FOO'], os.environ['BAR'], os.environ['BAZ'])"
    spec = {**process(show, None, FOO="plan"), "env_defaults": {"BAR": "dflt", "BAZ": "dflt"}}
    code, out, _ = launch(tmp_path, [{**spec, "rank": r} for r in range(count)])
    assert code == 0
    if count == 1:
        assert out == "plan job dflt\n"  # one process: its output as is
    else:
        assert sorted(out.splitlines()) == ["[rank 0] plan job dflt", "[rank 1] plan job dflt"]


def test_files_are_written_before_the_processes_start(tmp_path: Path) -> None:
    files = {"gpupool-hostfile": "gpupool-task-0 slots=2\n", "sub/dir/notes.txt": "é"}
    show = "print(open('gpupool-hostfile').read(), end=''); print(open('sub/dir/notes.txt').read())"
    code, out, _ = launch(tmp_path, [process(show)], files=files)
    assert (code, out) == (0, "gpupool-task-0 slots=2\né\n")


@pytest.mark.parametrize("name", ["../escaped", "a/../../escaped", "/ABS/escaped", ""])
def test_a_file_outside_the_working_directory_is_refused(tmp_path: Path, name: str) -> None:
    cwd = tmp_path / "task"
    cwd.mkdir()
    name = name.replace("/ABS", str(tmp_path))
    files = {name: "x", "fine.txt": "y"}
    code, out, err = launch(cwd, [process("open('ran', 'w')")], files=files)
    assert code == CODE_RUNNER_ERROR
    assert "must be a relative path inside the task" in err
    assert not (tmp_path / "escaped").exists()
    assert not (cwd / "fine.txt").exists() and not (cwd / "ran").exists()


def test_one_rank_failing_terminates_the_others_and_its_code_wins(tmp_path: Path) -> None:
    fail = (
        "import os, sys, time\nwhile not os.path.exists('ready-1'): time.sleep(0.01)\nsys.exit(3)"
    )
    survivor = process(STOPPABLE, 1, EXIT_ON_TERM="5")  # its own failure comes second
    code, out, _ = launch(tmp_path, [process(fail, 0), survivor])
    assert code == 3
    assert "[rank 1] rank 1 stopping\n" in out


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    fail = (
        "import os, sys, time\nwhile not os.path.exists('ready-1'): time.sleep(0.01)\nsys.exit(4)"
    )
    deaf = STOPPABLE.replace("signal.signal(signal.SIGTERM, stop)", "signal.signal(15, 1)")
    code, out, _ = launch(tmp_path, [process(fail, 0), process(deaf, 1)])  # FAILURE_GRACE_SECONDS
    assert code == 4
    assert "stopping" not in out


@pytest.mark.parametrize("kind", [LauncherKind.TORCH, LauncherKind.MPI])
def test_it_runs_the_plan_the_executor_writes(tmp_path: Path, kind: LauncherKind) -> None:
    """TaskLaunch.model_dump(mode="json"), as the executor writes it, is what it reads."""
    tasks = (GangTask(index=0, node="n0", address="127.0.0.1", gpus=2, gpu_indices=(0, 1)),)
    gang = Gang(job_id="job-1", tasks=tasks, rendezvous_port=29500)
    show = [sys.executable, "-c", "import os; print(os.environ['GPUPOOL_NODE'], os.getenv('RANK'))"]
    (plan,) = plan_launch(
        gang, Launcher(kind=kind), show, MpiAgent(argv=("true",), secret="s" * 32)
    )
    written = plan.model_dump(mode="json")
    if kind is LauncherKind.MPI:  # no mpirun here: run what it would start, in its env
        written["processes"] = [{**p, "argv": show} for p in written["processes"]]
    (tmp_path / "plan.json").write_text(json.dumps(written))
    argv = [sys.executable, "-m", "gpupool.runner.ranks", "plan.json"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    if kind is LauncherKind.TORCH:
        assert sorted(done.stdout.splitlines()) == ["[rank 0] n0 0", "[rank 1] n0 1"]
    else:
        assert done.stdout == "n0 None\n"
        assert (tmp_path / "gpupool-hostfile").read_text() == "gpupool-task-0 slots=2\n"


@pytest.mark.parametrize(("handle", "expected"), [("1", 0), ("0", 128 + signal.SIGTERM)])
def test_sigterm_to_the_launchers_group_ends_every_rank(
    tmp_path: Path, handle: str, expected: int
) -> None:
    ranks = [process(STOPPABLE, r, HANDLE_TERM=handle) for r in (0, 1)]
    launcher = start(tmp_path, ranks)
    groups = {wait_for(tmp_path / f"ready-{r}") for r in (0, 1)}
    assert groups == {str(launcher.pid)}  # the ranks share the launcher's group
    os.killpg(launcher.pid, signal.SIGTERM)
    out, _ = launcher.communicate(timeout=WAIT)
    assert launcher.returncode == expected
    stopped = sorted(line for line in out.decode().splitlines() if "stopping" in line)
    assert stopped == (["[rank 0] rank 0 stopping", "[rank 1] rank 1 stopping"] * int(handle))


def test_one_process_is_the_program_itself(tmp_path: Path) -> None:
    show = "import os, sys; print('pid', os.getpid(), end=''); sys.exit(7)"
    launcher = start(tmp_path, [process(show)])
    out, _ = launcher.communicate(timeout=WAIT)
    assert (launcher.returncode, out.decode()) == (7, f"pid {launcher.pid}")


def test_one_process_killed_by_a_signal_is_seen_killed(tmp_path: Path) -> None:
    die = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    code, out, _ = launch(tmp_path, [process(die)])
    assert (code, out) == (-signal.SIGTERM, "")


@pytest.mark.parametrize("count", [1, 2])
def test_sigpipe_is_not_left_ignored_for_the_program(tmp_path: Path, count: int) -> None:
    status = {"argv": ["grep", "SigIgn", "/proc/self/status"], "env": {}}
    code, out, _ = launch(tmp_path, [{**status, "rank": r} for r in range(count)])
    assert code == 0
    masks = [int(line.split()[-1], 16) for line in out.splitlines()]
    assert len(masks) == count
    assert all(not mask & (1 << (signal.SIGPIPE - 1)) for mask in masks)


@pytest.mark.parametrize("count", [1, 2])
def test_a_missing_program_exits_127_as_a_shell_does(tmp_path: Path, count: int) -> None:
    missing = {"argv": ["gpupool-no-such-program"], "env": {}}
    code, out, err = launch(tmp_path, [{**missing, "rank": r} for r in range(count)])
    assert code == CODE_NOT_FOUND
    assert "command not found: gpupool-no-such-program" in out + err


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"processes": []}, "'processes' must be a non-empty list"),
        ({"processes": [{"argv": "python"}]}, "'argv' must be a non-empty list of strings"),
        ({"processes": [{"argv": ["x"], "env": {"A": 1}}]}, "'env' must map names to strings"),
        ({"processes": [{"argv": ["x"], "rank": 0}] * 2}, "two processes have the same rank"),
    ],
)
def test_an_invalid_plan_is_refused_with_what_is_wrong(
    tmp_path: Path, plan: dict[str, object], message: str
) -> None:
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    argv = [sys.executable, "-m", "gpupool.runner.ranks", "plan.json"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == CODE_RUNNER_ERROR
    assert message in done.stderr


def test_it_imports_only_the_standard_library() -> None:
    """It runs inside the sandbox, where only the system's Python is certain to be."""
    check = (
        "import sys, gpupool.runner.ranks\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " - set(sys.stdlib_module_names) - {'gpupool', '__main__'}))"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    argv = [sys.executable, "-S", "-c", check]  # -S: no site-packages
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")
