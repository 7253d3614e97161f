"""The local executor runs a job with a code snapshot in it: unpacked once under the job's
directory, shared by its attempts, refused with a clear launch error when it cannot be."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from executor_helpers import py, wait_observed
from tests.support.code import archive, ref, regular, special
from tests.support.tasks import task

from gpupool.executors.base import LaunchError
from gpupool.executors.local import LocalExecutor
from gpupool.executors.task import Observed

# each attempt adds its number to a file of its working directory, then shows what is there
APPEND = (
    "import os; open('seen.txt', 'a').write(os.environ['GPUPOOL_ATTEMPT']); "
    "print(open('seen.txt').read(), sorted(os.listdir('.')))"
)


def code_task(tmp_path: Path, data: bytes, attempt: int = 1, command: list[str] | None = None):  # noqa: ANN201
    path = tmp_path / "store" / "code.tar.gz"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return task(command or py(APPEND), 7, attempt, code=ref(data), code_archive=str(path))


def test_attempts_share_the_unpacked_code(
    executor: LocalExecutor, jobs_dir: Path, tmp_path: Path
) -> None:
    data = archive(regular("train.py", b"print('hi')\n"))
    for attempt, seen in ((1, "1"), (2, "12")):
        handle = executor.start(code_task(tmp_path, data, attempt))
        assert wait_observed(executor, handle, Observed.EXITED).exit_code == 0
        log = executor.log_path(handle).read_text()
        assert log == f"{seen} ['seen.txt', 'train.py']\n"
        executor.release(handle)
    assert (jobs_dir / "7" / "code" / "train.py").read_text() == "print('hi')\n"


def test_a_missing_archive_is_a_launch_error_saying_so(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    job = code_task(tmp_path, archive(regular("a")))
    Path(job.code_archive).unlink()
    with pytest.raises(LaunchError) as failed:
        executor.start(job)
    assert failed.value.reason == "code_missing"
    assert "missing from the server's storage" in failed.value.user_message


def test_an_archive_that_cannot_be_unpacked_fails_the_launch(
    executor: LocalExecutor, jobs_dir: Path, tmp_path: Path
) -> None:
    data = archive(regular("a"), special("link", tarfile.SYMTYPE, "/etc/passwd"))
    with pytest.raises(LaunchError) as failed:
        executor.start(code_task(tmp_path, data))
    assert failed.value.reason == "code_unpack_failed"
    assert "member 'link'" in failed.value.user_message
    assert not (jobs_dir / "7" / "code").exists()
