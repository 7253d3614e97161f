"""What a newcomer meets when starting ``gpupool server``: declarations, hints, the lost admin
token and a second server on one data directory, all through the real commands."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.security.conftest import run_as
from tests.support.cli import CLI_TIMEOUT, Cli, hold, refused, wait_for, wait_status
from tests.support.server import DECLARED, ServerProcess, free_port
from tests.support.unix import system_account

NEW_TOKEN = re.compile(r"^    (gpt_\S+)$", re.MULTILINE)


def gpupool(
    *args: str, data_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The real ``gpupool ARGS`` on ``data_dir`` (GPUPOOL_DATA_DIR), its output captured."""
    variables = os.environ | {"GPUPOOL_DATA_DIR": str(data_dir)} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        env=variables,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )


def start_refused(result: subprocess.CompletedProcess, code: str) -> str:
    """The message of a server that refused to start: one 'error [code]: ...' line, exit 2."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error [{code}]: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# -- declared GPUs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (
            "8xFOO",
            "does not know how much memory a 'FOO' has; give it after a colon, like 8xFOO:24GiB",
        ),
        ("A100x8", "write the count first, like 8xA100"),
        ("4xA100:lots", "'lots' is not a byte quantity; write it like 20GiB"),
        ("0xA100", "write it as [COUNTx]MODEL[:MEMORY per GPU]"),
    ],
)
def test_a_bad_gpu_declaration_stops_the_server_with_the_accepted_form(
    tmp_path: Path, value: str, said: str
) -> None:
    data = tmp_path / "data"
    result = gpupool("server", "--port", str(free_port()), "--declare-gpus", value, data_dir=data)
    message = start_refused(result, "bad_setting")
    assert message.startswith("error [bad_setting]: --declare-gpus (GPUPOOL_DECLARED_GPUS): ")
    assert said in message
    assert not (data / "gpupool.db").exists()  # no admin created whose token nobody saw


def test_bad_declarations_from_the_environment_and_of_memory_are_bad_settings(
    tmp_path: Path,
) -> None:
    data, port = tmp_path / "data", str(free_port())
    from_env = gpupool(
        "server", "--port", port, data_dir=data, env={"GPUPOOL_DECLARED_GPUS": "8xFOO"}
    )
    assert "memory a 'FOO' has" in start_refused(from_env, "bad_setting")
    memory = gpupool(
        "server",
        "--port",
        port,
        "--declare-gpus",
        "8xA100",
        "--declare-memory",
        "lots",
        data_dir=data,
    )
    assert "--declare-memory (GPUPOOL_DECLARED_MEMORY)" in start_refused(memory, "bad_setting")


def test_a_known_model_is_declared_without_its_memory(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", gpus="8xA100").start()
    try:
        (node,) = Cli(server.url, server.token).json("nodes")
        assert [gpu["model"] for gpu in node["gpus"]] == ["A100"] * 8
        assert {gpu["memory_bytes"] for gpu in node["gpus"]} == {80 * 1024**3}
        assert "the declared A100 GPUs are taken to have 80 GiB each" in server.output()
        assert "declare 8xA100:40GiB if yours have that" in server.output()
    finally:
        server.stop()


# -- CPUs ------------------------------------------------------------------------------------


def test_few_cpus_say_what_to_do_and_declared_cpus_run_every_gpu(
    tmp_path: Path, exchange: Path, release: Path
) -> None:
    """8 GPUs on a host of 2 CPUs run 2 jobs of 1 CPU at a time; `why` says how to run more,
    and the same server started with --declare-cpus 16 runs all 8."""
    server = ServerProcess(tmp_path / "data", gpus="8xA100", env={"GPUPOOL_DECLARED_CPUS": "2"})
    server.start()
    try:
        cli = Cli(server.url, server.token)
        job = ["--gpus", "1", "--workdir", str(exchange), *hold(release)]
        ids = [cli.submit(*job) for _ in range(8)]
        wait_for(lambda: _count(cli, ids, "running") == 2 or None, what="two jobs to run")
        waiting = [job_id for job_id in ids if cli.job(job_id)["status"] == "pending"]
        assert len(waiting) == 6
        why = wait_for(lambda: _why_insufficient_cpu(cli, waiting[0]), what="InsufficientCpu")
        assert "a task asks for 1 CPU unless run with --cpus" in why
        assert "gpupool server --declare-cpus N (GPUPOOL_DECLARED_CPUS)" in why
        server.kill9()  # its jobs run on; the restarted server adopts them
        server.args = ["--declare-cpus", "16"]  # over GPUPOOL_DECLARED_CPUS=2
        server.start()
        for job_id in ids:
            wait_status(cli, job_id, {"running"})
        assert Cli(server.url, server.token).json("nodes")[0]["cpus"] == 16
    finally:
        release.touch()
        server.stop()


def _count(cli: Cli, ids: list[int], status: str) -> int:
    return sum(cli.job(job_id)["status"] == status for job_id in ids)


def _why_insufficient_cpu(cli: Cli, job_id: int) -> str | None:
    text = cli.ok("why", str(job_id))
    return text if "reason:     InsufficientCpu" in text else None


# -- no GPU ----------------------------------------------------------------------------------


def test_a_server_without_gpus_says_how_to_declare_them(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has an NVIDIA driver: its GPUs would be found")
    server = ServerProcess(tmp_path / "data", gpus="", env={"GPUPOOL_USE_NVML": "false"})
    server.start()
    try:
        hint = "declare them with --declare-gpus 4xA100 or GPUPOOL_DECLARED_GPUS=4xA100"
        assert "no GPU found" in server.output() and hint in server.output()
        result = Cli(server.url, server.token)("nodes")
        assert result.returncode == 0, result.stderr
        assert "no GPU found" in result.stderr
        assert "gpupool server --declare-gpus 4xA100, or GPUPOOL_DECLARED_GPUS" in result.stderr
    finally:
        server.stop()


def test_nodes_says_nothing_of_declaring_when_there_are_gpus(pool: ServerProcess) -> None:
    result = Cli(pool.url, pool.token)("nodes")
    assert result.returncode == 0 and "no GPU found" not in result.stderr


# -- the admin token, recovered on the host ----------------------------------------------------


def test_admin_token_works_on_a_stopped_and_on_a_running_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data).start()
    try:
        server.stop()
        stopped = gpupool("admin-token", "--data-dir", str(data), data_dir=tmp_path / "elsewhere")
        assert stopped.returncode == 0, stopped.stderr
        first = NEW_TOKEN.search(stopped.stdout).group(1)
        assert "(the server is not running: start it first)" in stopped.stdout
        server.start()
        assert "admin" in Cli(server.url, first).ok("whoami")
        running = gpupool("admin-token", data_dir=data)
        assert running.returncode == 0, running.stderr
        second = NEW_TOKEN.search(running.stdout).group(1)
        assert f"gpupool login {server.url} --token {second}" in running.stdout
        admin = Cli(server.url, second)
        assert "admin" in admin.ok("whoami")
        names = [token["name"] for token in admin.json("tokens")]
        assert names.count(f"admin-token on the host by {getpass.getuser()}") == 2
    finally:
        server.stop()


def test_admin_token_refuses_what_it_cannot_do(pool: ServerProcess, admin: Cli) -> None:
    data = pool.data_dir
    admin.ok("users", "create", "ann-d2", "--team", "default")
    unknown = gpupool("admin-token", "--user", "nobody", data_dir=data)
    assert refused(unknown, "not_found") and "no user named 'nobody'" in unknown.stderr
    member = gpupool("admin-token", "--user", "ann-d2", data_dir=data)
    assert refused(member, "forbidden") and "is a member, not an admin" in member.stderr
    missing = gpupool("admin-token", data_dir=pool.data_dir.parent / "missing")
    assert refused(missing, "no_pool") and "--data-dir" in missing.stderr


def test_admin_token_refuses_an_account_that_cannot_read_the_data_dir() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    with _world_visible_dir() as base, system_account() as account:
        server = ServerProcess(base / "data").start()
        try:
            assert (base / "data").stat().st_mode & 0o777 == 0o700
            command = [*run_as(account), sys.executable, "-m", "gpupool", "admin-token"]
            env = os.environ | {"GPUPOOL_DATA_DIR": str(base / "data")}
            result = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT
            )
            assert refused(result, "forbidden"), result.stderr
            assert f"cannot read and write {base / 'data'}" in result.stderr
            assert "gpt_" not in result.stdout
        finally:
            server.stop()


# -- one server per data directory ------------------------------------------------------------


def test_a_second_server_on_one_data_dir_is_refused_until_the_first_is_gone(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data).start()
    try:
        port = str(free_port())
        second = gpupool("server", "--port", port, "--declare-gpus", DECLARED, data_dir=data)
        message = start_refused(second, "data_dir_in_use")
        assert f"another gpupool server (pid {first.process.pid})" in message
        assert f"uses {data}" in message
        assert httpx.get(f"{first.url}/api/v1/health", timeout=10).status_code == 200
        first.kill9()  # the kernel drops its lock
        again = ServerProcess(data).start()
        again.stop()
    finally:
        first.stop()


def test_part_files_left_by_a_killed_server_are_swept_at_start_and_no_others(
    tmp_path: Path,
) -> None:
    """A registration or an upload cut short by kill -9 leaves a part file; the next server
    on the data directory removes it as it starts. A server refused the data directory
    touches nothing (the part file of the running server's reception stays)."""
    data = tmp_path / "data"
    left = [data / "models/incoming/version-a.part", data / "code/incoming/upload-b.part"]
    kept = data / "models/incoming/notes.txt"
    for path in [*left, kept]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 4096)
    first = ServerProcess(data).start()
    try:
        assert [path.exists() for path in left] == [False, False]
        assert kept.exists()
        receiving = data / "models/incoming/version-c.part"
        receiving.write_bytes(b"y")
        port = str(free_port())
        second = gpupool("server", "--port", port, "--declare-gpus", DECLARED, data_dir=data)
        start_refused(second, "data_dir_in_use")
        assert receiving.exists()
    finally:
        first.stop()


# -- helpers -----------------------------------------------------------------------------------


@contextmanager
def _world_visible_dir() -> Iterator[Path]:
    """A directory under /tmp that other accounts may enter (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gpupool-d2-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
