"""`gpupool why JOB` through the real CLI against a real server (4 declared A100s)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import FINAL, Cli, hold, refused, wait_for, wait_status


def explained(cli: Cli, job_id: int) -> dict:
    """``gpupool why -o json`` once the scheduler has queued the job and estimated its start."""

    def ready() -> dict | None:
        answer = cli.json("why", str(job_id))
        return answer if answer["position"] and answer["eta"] is not None else None

    return wait_for(ready, 90.0, f"job {job_id} to be explained")


def test_why_says_the_reason_position_blockers_and_estimated_start(
    admin: Cli, release: Path, exchange: Path
) -> None:
    holder = admin.submit(
        "--gpus", "4", "--max-runtime", "1h", "--workdir", str(exchange), *hold(release)
    )
    wait_status(admin, holder, {"running"})
    waiting = admin.submit("--gpus", "2", "--max-runtime", "10m", "--", "true")

    answer = explained(admin, waiting)
    assert (answer["status"], answer["code"], answer["position"]) == (
        "pending",
        "InsufficientGpus",
        1,
    )
    started = admin.job(holder)["attempts_detail"][-1]["started_at"]
    assert abs(answer["eta"] - (started + 3600)) < 1e-3
    assert answer["estimate"]["is_estimate"] is True

    printed = admin.ok("why", str(waiting))
    lines = printed.splitlines()
    assert lines[0].startswith(f"job {waiting} pending: it waits: ")
    assert "reason:     InsufficientGpus" in lines
    assert "position:   1 in its team's queue (1 is next)" in lines
    starts = next(line for line in lines if line.startswith("starts:"))
    assert "about " in starts and "an estimate" in starts
    assert any(line.startswith("assumes:    this job runs 10m, its max runtime") for line in lines)
    assert any("no new job is submitted" in line for line in lines)

    admin.ok("cancel", str(waiting))
    release.touch()
    wait_status(admin, holder, FINAL)


def test_an_unknown_start_says_why_and_how_a_max_runtime_gives_one(
    admin: Cli, release: Path, exchange: Path
) -> None:
    """A new user's first `echo hello` is the only history; a job run without --max-runtime
    soon outruns it, so a job waiting for its GPUs has no estimate: `why` and `queue` say why
    and what gives one. A holder run with --max-runtime gives the waiting job its start."""
    assert admin("run", "--follow", "--", "echo", "hello").returncode == 0
    holder = admin.submit("--gpus", "4", "--workdir", str(exchange), *hold(release))
    wait_status(admin, holder, {"running"})
    waiting = admin.submit("--gpus", "1", "--", "true")

    def unknown() -> dict | None:
        answer = admin.json("why", str(waiting))
        outrun = (answer["eta_unknown"] or "").startswith("the running jobs have all outrun")
        return answer if answer["position"] and outrun else None

    wait_for(unknown, 90.0, f"job {waiting}'s start to be unknown")
    starts = next(line for line in admin.ok("why", str(waiting)).splitlines() if "starts:" in line)
    assert starts.startswith("starts:     unknown: the running jobs have all outrun")
    assert "no --max-runtime" in starts
    printed = admin.ok("queue")
    row = next(line for line in printed.splitlines() if line.split()[1:2] == [str(waiting)])
    assert row.split()[-1] == "unknown"
    assert f"ETA unknown for job {waiting}: the running jobs have all outrun" in printed

    admin.ok("cancel", str(waiting), str(holder))
    wait_status(admin, holder, FINAL)
    bounded = admin.submit(
        "--gpus", "4", "--max-runtime", "1h", "--workdir", str(exchange), *hold(release)
    )
    wait_status(admin, bounded, {"running"})
    waiting = admin.submit("--gpus", "1", "--", "true")
    answer = explained(admin, waiting)
    started = admin.job(bounded)["attempts_detail"][-1]["started_at"]
    assert abs(answer["eta"] - (started + 3600)) < 1e-3
    admin.ok("cancel", str(waiting))
    release.touch()
    wait_status(admin, bounded, FINAL)


def test_why_answers_plainly_for_a_running_and_an_ended_job(
    admin: Cli, release: Path, exchange: Path
) -> None:
    running = admin.submit("--gpus", "1", "--workdir", str(exchange), *hold(release))
    wait_status(admin, running, {"running"})
    printed = admin.ok("why", str(running))
    node = admin.job(running)["placement"]["node"]
    expected = f"job {running} running: it is running on {node}: it does not wait any more"
    assert printed.splitlines()[0] == expected
    assert "starts:" not in printed
    release.touch()
    wait_status(admin, running, FINAL)
    ended = admin.ok("why", str(running)).splitlines()[0]
    assert ended == f"job {running} succeeded: it has ended: it succeeded"


def test_why_refuses_unknown_jobs_with_a_stable_code(admin: Cli) -> None:
    assert refused(admin("why", "999999"), "not_found")
    usage = admin("why", "abc")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert "why" in admin.ok("--help")
