"""A job preempted and run again, through the real CLI against a real server (4 declared
A100s): `gpupool logs -f` gets every byte of both attempts and announces the second; `gpupool
show` counts the GPU time of the attempt that runs."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests.support.cli import CLI_TIMEOUT, FINAL, Cli, hold, refused, wait_for, wait_status
from tests.support.workloads import ANNOUNCEMENT, FIRST, SECOND, TWO_ATTEMPTS


def test_logs_follow_reads_every_byte_of_each_attempt_and_announces_the_next(
    admin: Cli, exchange: Path
) -> None:
    admin.ok("team", "create", "owners", "--guarantee", "4")
    command = ["--", sys.executable, "-c", TWO_ATTEMPTS]
    victim = admin.submit(
        "--gpus", "4", "--grace-period", "30s", "--workdir", str(exchange), *command
    )
    wait_for(lambda: admin.ok("logs", str(victim)).count("\n") >= 5, what="attempt 1's lines")
    follower = admin.popen("logs", "-f", str(victim))
    # it follows attempt 1 before the preemption: its first line is out (else a follower
    # that starts late meets the job requeued, and says it has not started yet)
    started = os.read(follower.stdout.fileno(), 1 << 16).decode()  # raw: communicate reads on

    # the owners' guarantee takes its GPU back: the victim is preempted, then runs again
    owner = admin.submit("--team", "owners", "--gpus", "1", "--", "true")
    out, err = follower.communicate(timeout=CLI_TIMEOUT)
    out = started + out
    assert follower.returncode == 0, err
    done = wait_status(admin, victim, FINAL)
    assert (done["status"], done["attempts"], done["preemptions"]) == ("succeeded", 2, 1)
    assert wait_status(admin, owner, FINAL)["status"] == "succeeded"

    # each attempt's own log (--attempt N): attempt 1's ends with its answer to SIGTERM
    first = admin.ok("logs", "--attempt", "1", str(victim))
    assert first.startswith(FIRST) and first.endswith("attempt 1 got SIGTERM\n"), first
    assert admin.ok("logs", "--attempt", "2", str(victim)) == SECOND
    missing = admin("logs", "--attempt", "3", str(victim))
    assert refused(missing, "not_found") and "has no attempt 3 (it has had 2)" in missing.stderr
    # followed: every byte of both, in order, and the second attempt announced on stderr
    assert out == first + SECOND
    assert err.strip() == ANNOUNCEMENT
    # without -f: the same, as written so far
    whole = admin("logs", str(victim))
    assert (whole.stdout, whole.stderr.strip()) == (first + SECOND, ANNOUNCEMENT)


def test_show_counts_the_gpu_time_of_the_running_attempt(
    admin: Cli, release: Path, exchange: Path
) -> None:
    job_id = admin.submit("--gpus", "2", "--workdir", str(exchange), *hold(release))
    wait_status(admin, job_id, {"running"})

    def attained() -> str | None:
        line = next(x for x in admin.ok("show", str(job_id)).splitlines() if "attained:" in x)
        return line if not re.search(r"attained:\s+0(\.00 GPU-hours| GPU-seconds)", line) else None

    line = wait_for(attained, what="the running attempt's GPU time to show")
    assert re.fullmatch(r"attained:\s+(\d+ GPU-seconds|\d+\.\d\d GPU-hours)", line.strip()), line
    job = admin.job(job_id)
    assert job["status"] == "running" and job["attained_gpu_seconds"] > 0
    assert job["preemptions"] == 0, "the running attempt counts, not only earlier ones"
    release.touch()
    wait_status(admin, job_id, FINAL)
