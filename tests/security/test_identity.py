"""Whose account a job runs under: its user's own (created, or mapped by an admin) when the
server is root, the server's in a user namespace otherwise; what it writes is that account's,
and a working directory that account cannot read is refused."""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

import pytest

from tests.security.conftest import Pool
from tests.support.unix import system_account

WRITE = (
    "import os\n"
    "open(os.environ['GPUPOOL_OUTPUT_DIR'] + '/result', 'w').write('r')\n"
    "open('made-here', 'w').write('w')\n"
    "print('UID=' + str(os.getuid()), flush=True)\n"
)


def test_what_a_job_writes_is_its_accounts(pool: Pool, exchange: Path) -> None:
    name, client = pool.member("team-a")
    job = pool.submit(client, [sys.executable, "-c", WRITE], workdir=str(exchange))
    done = pool.wait(job["id"], {"succeeded", "failed", "lost"})
    assert done["status"] == "succeeded", pool.log(job["id"])
    expected = pwd.getpwnam(f"gp-{name}").pw_uid if pool.as_root else pool.server_uid()
    assert f"UID={expected}" in pool.log(job["id"])
    result = pool.server.data_dir / "jobs" / str(job["id"]) / "outputs" / "result"
    assert result.stat().st_uid == expected
    assert (exchange / "made-here").stat().st_uid == expected


def test_a_user_mapped_to_an_account_runs_as_it(pool: Pool, exchange: Path) -> None:
    if not pool.as_root:
        pytest.skip("accounts are used when the server runs as root")
    name, client = pool.member("team-a")
    with system_account() as account:
        mapped = pool.admin.patch(f"/users/{name}", json={"unix_user": account})
        assert mapped.status_code == 200, mapped.text
        job = pool.submit(client, [sys.executable, "-c", WRITE], workdir=str(exchange))
        done = pool.wait(job["id"], {"succeeded", "failed", "lost"})
        assert done["status"] == "succeeded", pool.log(job["id"])
        assert f"UID={pwd.getpwnam(account).pw_uid}" in pool.log(job["id"])


def test_a_workdir_its_account_cannot_read_is_refused(pool: Pool, exchange: Path) -> None:
    if not pool.as_root:
        pytest.skip("the server's own account can read what it made")
    private = exchange / "private"
    private.mkdir(mode=0o700)  # root's alone
    (private / "project").mkdir()
    os.chmod(private / "project", 0o755)
    name, client = pool.member("team-a")
    job = pool.submit(client, ["ls"], workdir=str(private / "project"))
    done = pool.wait(job["id"], {"succeeded", "failed", "lost"})
    assert (done["status"], done["exit_code"]) == ("failed", 126)
    assert f"is not readable by the Unix account gp-{name}" in done["message"]
