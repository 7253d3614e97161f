"""Acceptance tests of the `gpupool` CLI, run as a subprocess against a real server."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import typer

from gpupool.cli import jobs
from tests.support.cli import CLI_TIMEOUT, FINAL, Cli, hold, refused, wait_for, wait_status
from tests.support.server import ServerProcess

# -- session ---------------------------------------------------------------------------------


def test_login_writes_a_private_config_used_by_later_commands(pool: ServerProcess) -> None:
    anonymous = Cli(pool.url)
    missing = anonymous("ls")
    assert refused(missing, "not_logged_in")
    assert "not logged in: run gpupool login URL --token T" in missing.stderr

    assert refused(anonymous("login", pool.url, "--token", "gpt_wrong"), "unauthenticated")
    config = Path(os.environ["GPUPOOL_CONFIG"])
    assert not config.exists()

    assert "admin" in anonymous.ok("login", pool.url + "/", "--token", str(pool.token))
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {"url": pool.url, "token": pool.token}
    assert json.loads(anonymous.ok("whoami", "-o", "json"))["user"] == "admin"
    assert anonymous.ok("whoami").startswith("admin (admin of default)")


# -- run -------------------------------------------------------------------------------------


def test_run_follow_prints_one_gpu_uuid_and_exits_0(admin: Cli) -> None:
    program = 'import os; print(os.environ["CUDA_VISIBLE_DEVICES"])'
    result = admin("run", "--gpus", "1", "--follow", "--", "python", "-c", program)
    assert result.returncode == 0, result.stderr
    uuids = {gpu["uuid"] for node in admin.json("nodes") for gpu in node["gpus"]}
    assert result.stdout.splitlines() in ([uuid] for uuid in uuids)


def test_run_follow_exits_with_the_job_exit_code(admin: Cli) -> None:
    result = admin("run", "--follow", "--", "sh", "-c", "echo out; exit 3")
    assert result.returncode == 3
    assert result.stdout == "out\n"
    assert "failed" in result.stderr


def test_a_job_runs_where_it_was_submitted_or_in_its_output_directory(
    admin: Cli, exchange: Path
) -> None:
    (exchange / "train.py").write_text("import os; print(os.getcwd())")
    here = admin("run", "--follow", "--", "python", "train.py", cwd=exchange)
    assert here.returncode == 0, here.stderr
    assert here.stdout.strip() == str(exchange)
    own = admin(
        "run", "--workdir", "", "--follow", "--", "python", "-c", "import os; print(os.getcwd())"
    )
    assert own.returncode == 0, own.stderr
    assert own.stdout.strip().endswith("/outputs")


def test_run_prints_only_the_job_id_or_its_json(admin: Cli) -> None:
    printed = admin.ok("run", "--name", "quiet", "--env", "A=1", "--env", "B=x=y", "--", "true")
    assert printed.strip().isdigit() and printed.count("\n") == 1
    job = json.loads(admin.ok("run", "-o", "json", "--cpus", "2", "--memory", "1GiB", "--", "true"))
    assert job["spec"]["command"] == ["true"] and job["status"] == "pending"
    resources = job["spec"]["resources"]
    assert (resources["cpus"], resources["memory_bytes"], resources["gpu_memory_bytes"]) == (
        2,
        2**30,
        None,
    )
    first = wait_status(admin, int(printed), FINAL)
    assert first["status"] == "succeeded" and first["spec"]["env"] == {"A": "1", "B": "x=y"}


def test_two_half_gpu_jobs_run_at_once_on_one_gpu(
    admin: Cli, release: Path, exchange: Path
) -> None:
    first = admin.submit("--gpus", "0.5", "--workdir", str(exchange), *hold(release))
    second = admin.submit("--gpus", "0.5", "--workdir", str(exchange), *hold(release))
    jobs = [wait_status(admin, job_id, {"running"}) for job_id in (first, second)]
    placed = [job["placement"]["gpus"] for job in jobs]
    assert len(placed[0]) == len(placed[1]) == 1
    assert placed[0][0]["uuid"] == placed[1][0]["uuid"]
    assert placed[0][0]["share"] == placed[1][0]["share"] == 0.5
    assert all(job["status"] == "running" for job in (admin.job(first), admin.job(second)))
    release.touch()
    for job_id in (first, second):
        assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"


def test_requests_no_node_can_run_are_refused(admin: Cli) -> None:
    too_many = admin("run", "--gpus", "8", "--", "true")
    assert refused(too_many, "unsatisfiable")
    assert "4 GPUs" in too_many.stderr
    fraction = admin("run", "--gpus", "1.5", "--", "true")
    assert refused(fraction, "invalid_request") and "fraction" in fraction.stderr
    bad_name = admin("run", "--env", "1BAD=x", "--", "true")
    assert refused(bad_name, "invalid_request") and "1BAD" in bad_name.stderr


def test_usage_errors_exit_2_without_a_traceback(admin: Cli) -> None:
    for args in (["--env", "NOEQUALS"], ["--gpus", "lots"], []):
        result = admin("run", *args, "--", "true") if args else admin("run")
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert "NAME=VALUE" in admin("run", "--env", "NOEQUALS", "--", "true").stderr


def test_a_job_file_given_as_the_command_is_refused_with_the_command_for_it(
    admin: Cli, tmp_path: Path
) -> None:
    """`-f` is --follow: `gpupool run -f job.yaml` would run job.yaml as a program."""
    before = {job["id"] for job in admin.json("ls", "--all")}
    (tmp_path / "job.yaml").write_text("command: [python, train.py]\n")
    for args in (["-f", "job.yaml"], ["--", "job.yaml"]):
        result = admin("run", *args, cwd=tmp_path)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert "gpupool run takes a command" in result.stderr
        assert "gpupool apply -f" in result.stderr and "Traceback" not in result.stderr
    assert {job["id"] for job in admin.json("ls", "--all")} == before, "nothing was submitted"
    program = tmp_path / "x.json"  # a program of that name still runs, made executable
    program.write_text("#!/bin/sh\necho ran\n")
    program.chmod(0o755)
    submitted = admin("run", "--code", "--", "./x.json", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout)
    ended = wait_status(admin, job_id, FINAL)["status"]
    assert ended == "succeeded", admin("logs", str(job_id)).stdout


def test_a_gpu_type_without_gpus_is_refused_before_anything_is_sent(admin: Cli) -> None:
    before = {job["id"] for job in admin.json("ls", "--all")}
    result = admin("run", "--gpu-type", "A100", "--", "true")
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert "--gpus" in result.stderr and "Traceback" not in result.stderr
    assert {job["id"] for job in admin.json("ls", "--all")} == before, "nothing was submitted"
    job_id = admin.submit("--gpu-type", "A100", "--gpu-memory", "1GiB", "--", "true")
    assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"


def test_control_characters_from_the_server_are_printed_escaped(admin: Cli) -> None:
    """A name or command holding terminal controls (clear the screen, return, bell) is shown
    as visible escapes by ls, show and error lines; the job's own log stays as it wrote it."""
    name, word = "evil\x1b[2J\r\x07", "\x1b]0;pwned\x07"
    job_id = admin.submit("--name", name, "--", "echo", word)
    assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"
    listed = admin.ok("ls", "--all")
    shown = admin.ok("show", str(job_id))
    for printed in (listed, shown):
        assert "\x1b" not in printed and "\x07" not in printed
    assert r"evil\x1b[2J\r\x07" in listed and r"evil\x1b[2J\r\x07" in shown
    assert r"\x1b]0;pwned\x07" in shown
    assert admin.ok("logs", str(job_id)) == word + "\n", "a job's log is its own output"
    error = admin("run", "--team", "no\x1b[2Jsuch", "--", "true")
    assert refused(error, "unknown_team") and r"no\x1b[2Jsuch" in error.stderr
    assert "\x1b" not in error.stderr


# -- ls, show, logs, cancel ------------------------------------------------------------------


def test_ls_show_logs_and_cancel_of_a_running_job(
    admin: Cli, release: Path, exchange: Path
) -> None:
    job_id = admin.submit(
        "--name",
        "sleepy",
        "--gpus",
        "1",
        "--workdir",
        str(exchange),
        *hold(release, "echo hello; "),
    )
    wait_status(admin, job_id, {"running"})
    wait_for(lambda: admin.ok("logs", str(job_id)) == "hello\n", what="the job's log")

    listed = admin.json("ls")
    assert [job["status"] for job in listed if job["id"] == job_id] == ["running"]
    row = next(line for line in admin.ok("ls").splitlines() if line.startswith(f"{job_id} "))
    assert "sleepy" in row and "running" in row and "admin" in row

    shown = admin.ok("show", str(job_id))
    assert "command:" in shown and "echo hello" in shown
    assert "GPU-" in shown and "share 1" in shown and "Started" in shown

    assert admin.ok("cancel", str(job_id)).strip() == f"job {job_id}: cancel requested"
    assert wait_status(admin, job_id, FINAL)["status"] == "cancelled"
    assert job_id not in [job["id"] for job in admin.json("ls")]
    assert job_id in [job["id"] for job in admin.json("ls", "--all")]
    assert job_id in [job["id"] for job in admin.json("ls", "--status", "cancelled")]
    assert refused(admin("cancel", "999999"), "not_found")


def test_logs_follow_ends_with_the_job(admin: Cli, release: Path, exchange: Path) -> None:
    job_id = admin.submit("--workdir", str(exchange), *hold(release, "echo one; ", "; echo two"))
    wait_status(admin, job_id, {"running"})
    follower = admin.popen("logs", "-f", str(job_id))
    release.touch()
    out, err = follower.communicate(timeout=CLI_TIMEOUT)
    assert follower.returncode == 0, err
    assert out == "one\ntwo\n"


def test_run_follow_of_a_cancelled_job_exits_130(admin: Cli, release: Path, exchange: Path) -> None:
    follower = admin.popen(
        "run", "--follow", "--workdir", str(exchange), *hold(release, "echo started; ")
    )
    job_id = wait_for(lambda: _running_job_with(admin, "echo started"), what="the job to run")
    admin.ok("cancel", str(job_id))
    out, err = follower.communicate(timeout=CLI_TIMEOUT)
    assert follower.returncode == 130, err
    assert out.startswith("started\n")


def _running_job_with(cli: Cli, text: str) -> int | None:
    for job in cli.json("ls", "--status", "running"):
        if text in " ".join(job["spec"]["command"]):
            return job["id"]
    return None


# -- nodes -----------------------------------------------------------------------------------


def test_nodes_show_four_gpus_and_who_holds_a_busy_one(
    admin: Cli, release: Path, exchange: Path
) -> None:
    nodes = admin.json("nodes")
    assert sum(len(node["gpus"]) for node in nodes) == 4
    # declared GPUs have no links or NUMA nodes: one domain, named by the lowest index
    assert [gpu["domain"] for node in nodes for gpu in node["gpus"]] == [0, 0, 0, 0]
    job_id = admin.submit(
        "--gpus", "1", "--name", "holder", "--workdir", str(exchange), *hold(release)
    )
    wait_status(admin, job_id, {"running"})

    def held() -> dict | None:
        gpus = [gpu for node in admin.json("nodes") for gpu in node["gpus"]]
        return next((g for g in gpus if any(h["job_id"] == job_id for h in g["holders"])), None)

    gpu = wait_for(held, what="a GPU held by the job")
    assert gpu["used_share"] == 1
    assert [(h["user"], h["share"], h["job_name"]) for h in gpu["holders"]] == [
        ("admin", 1, "holder")
    ]
    table = admin.ok("nodes")
    assert f"job {job_id} (admin, 1)" in table and "A100-SXM4-80GB" in table and "80 GiB" in table
    lines = [line.split() for line in table.splitlines()]
    assert ["GPU", "DOMAIN", "MODEL", "MEMORY", "USED", "HOLDERS"] in lines
    assert [(w[0], w[1]) for w in lines if w and w[0].isdigit()] == [
        ("0", "0"),
        ("1", "0"),
        ("2", "0"),
        ("3", "0"),
    ]
    release.touch()
    wait_status(admin, job_id, FINAL)


def test_run_help_is_readable_at_80_columns() -> None:
    """Every option of `gpupool run --help` is shown whole, in lines that fit 80 columns."""
    app = typer.Typer(add_completion=False)
    app.command()(jobs.run)
    command = typer.main.get_command(app)
    names = [
        name
        for param in command.params
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("--")
    ]
    env = os.environ | {"COLUMNS": "80", "TERM": "dumb"}
    shown = subprocess.run(
        [sys.executable, "-m", "gpupool", "run", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    words = set(re.findall(r"--[a-z][a-z-]*", shown.stdout))
    assert [name for name in names if name not in words] == []
