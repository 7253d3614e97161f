"""`gpupool run --shm-size` through the real CLI against a real server: the job's /dev/shm is
that size, `gpupool show` says so, and a size over the job's memory is refused."""

from __future__ import annotations

import sys

from tests.support.cli import FINAL, Cli, refused, wait_status

SHM_SIZE = "import os; s = os.statvfs('/dev/shm'); print('SHM=%d' % (s.f_blocks * s.f_frsize))"


def test_shm_size_sizes_the_job_s_dev_shm(admin: Cli) -> None:
    job_id = admin.submit("--shm-size", "16MiB", "--", sys.executable, "-c", SHM_SIZE)
    assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"
    assert f"SHM={16 * 1024**2}" in admin.ok("logs", str(job_id))
    assert ", /dev/shm 16 MiB" in admin.ok("show", str(job_id))


def test_a_dev_shm_larger_than_the_job_s_memory_is_refused(admin: Cli) -> None:
    result = admin("run", "--memory", "1GiB", "--shm-size", "2GiB", "--", "true")
    assert refused(result, "invalid_request"), result.stderr
    assert "ask for more memory (--memory) or a smaller --shm-size" in result.stderr
