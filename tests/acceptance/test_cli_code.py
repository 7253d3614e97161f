"""``gpupool run --code``: the real CLI sends the directory it runs in to a real server, and the
job runs in exactly its files not ignored, read-write; too much is refused before it is sent."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli, refused
from tests.support.code import packed, ref, tree
from tests.support.server import ServerProcess

MAX_CODE_BYTES = 64 * 1024
LIST_AND_WRITE = [
    "--",
    "sh",
    "-c",
    "find . | sort; echo written > out.txt; cat out.txt; cat sub/b.txt",
]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server that takes code snapshots of at most 64 KiB."""
    env = {"GPUPOOL_MAX_CODE_BYTES": str(MAX_CODE_BYTES)}
    process = ServerProcess(tmp_path_factory.mktemp("code") / "data", env=env).start()
    yield process
    process.stop()


def project(root: Path) -> Path:
    return tree(
        root,
        {
            ".gitignore": "*.log\n__pycache__/\n",
            "train.py": "print('train')\n",
            "debug.log": "ignored",
            "__pycache__/train.cpython-311.pyc": "ignored",
            "sub/b.txt": "from b\n",
            ".git/config": "never sent",
        },
    )


def test_run_code_sends_the_directory_and_the_job_works_in_it(admin: Cli, tmp_path: Path) -> None:
    source = project(tmp_path / "project")

    result = admin("run", "--code", "--follow", *LIST_AND_WRITE, cwd=source)

    assert result.returncode == 0, result.stderr
    assert result.stdout == (".\n./.gitignore\n./sub\n./sub/b.txt\n./train.py\nwritten\nfrom b\n")
    sent = re.search(
        r"sent (\S+): 3 files, 41 B \((\d+) B packed\), (sha256:\w{12})", result.stderr
    )
    assert sent is not None, result.stderr
    assert sent.group(1) == str(source)
    job_id = int(re.search(r"job (\d+) submitted", result.stderr).group(1))
    shown = admin.ok("show", str(job_id))
    assert re.search(
        rf"code:\s+{sent.group(3)}\w+, 3 files, 41 B \({sent.group(2)} B packed\)", shown
    )
    assert "workdir:" not in shown
    assert not (source / "out.txt").exists()  # the job wrote into its own copy

    again = admin("run", "--code", "--", "true", cwd=source)
    assert again.returncode == 0, again.stderr
    assert f"the server has {source}: 3 files" in again.stderr


def test_workdir_names_the_directory_sent(admin: Cli, tmp_path: Path) -> None:
    source = project(tmp_path / "elsewhere")
    result = admin(
        "run",
        "--code",
        "--workdir",
        str(source),
        "--follow",
        "--",
        "cat",
        "train.py",
        cwd=tmp_path,
    )
    assert (result.returncode, result.stdout) == (0, "print('train')\n"), result.stderr


def test_too_large_is_refused_before_sending_with_the_biggest_parts(
    admin: Cli, tmp_path: Path
) -> None:
    source = project(tmp_path / "big")
    (source / "weights.bin").write_bytes(os.urandom(2 * MAX_CODE_BYTES))

    result = admin("run", "--code", "--", "true", cwd=source)

    assert refused(result, "code_too_large"), result.stderr
    assert "packs to more than 64 KiB" in result.stderr
    assert ".gpupoolignore" in result.stderr and "--workdir, without --code" in result.stderr
    assert "Biggest: weights.bin 128 KiB" in result.stderr
    (source / ".gpupoolignore").write_text("*.bin\n")
    assert admin("run", "--code", "--", "true", cwd=source).returncode == 0


def test_code_without_a_directory_is_a_usage_error(admin: Cli, tmp_path: Path) -> None:
    result = admin("run", "--code", "--workdir", "", "--", "true", cwd=tmp_path)
    assert result.returncode == 2 and "--code sends a directory" in result.stderr


def test_an_acknowledged_upload_survives_kill_9(server: ServerProcess, tmp_path: Path) -> None:
    data = packed(tree(tmp_path / "src", {"kept.txt": "still here\n"}))
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30) as api:
        assert api.put(f"/code/{ref(data)}", content=data).status_code == 200

    server.kill9()
    server.start()

    cli = Cli(server.url, server.token)
    result = cli("run", "--code", "--follow", "--", "cat", "kept.txt", cwd=tmp_path / "src")
    assert (result.returncode, result.stdout) == (0, "still here\n"), result.stderr
    assert "the server has" in result.stderr  # known after the restart: not sent again
