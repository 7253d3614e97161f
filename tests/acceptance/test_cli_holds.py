"""Held jobs through the real CLI against a real server: `gpupool run --hold` queues a job
that waits with reason Held while a later job runs, `gpupool why` says how to release it,
`gpupool release` lets it run; `gpupool hold` holds a pending job, and a job that is not
pending is refused with a message and exit code 1."""

from __future__ import annotations

from tests.support.cli import FINAL, Cli, refused, wait_status


def test_a_job_run_held_waits_until_released_then_runs(admin: Cli) -> None:
    held = admin.submit("--hold", "--", "true")
    later = admin.submit("--", "true")  # the scheduler passed the held job by once it ends
    assert wait_status(admin, later, FINAL)["status"] == "succeeded"
    job = admin.job(held)
    assert (job["status"], job["reason"], job["attempts"]) == ("pending", "Held", 0)
    why = admin.ok("why", str(held))
    assert f"it is held and starts only once released (gpupool release {held})" in why
    assert admin.ok("release", str(held)).startswith(f"job {held}: Queued: released by ")
    assert wait_status(admin, held, FINAL)["status"] == "succeeded"
    reasons = [event["reason"] for event in admin.job(held)["events"]]
    assert reasons.index("Held") < reasons.index("Released") < reasons.index("Started")


def test_hold_holds_a_pending_job_and_refuses_an_ended_one(admin: Cli) -> None:
    first = admin.submit("--", "true")
    assert wait_status(admin, first, FINAL)["status"] == "succeeded"
    waiting = admin.submit("--hold", "--after", str(first), "--", "true")
    said = admin.ok("hold", str(waiting))
    assert said == f"job {waiting}: Held: held at submission: gpupool release {waiting}\n"
    result = admin("hold", str(first), str(waiting))
    assert refused(result, "conflict") and "only a pending job can be held" in result.stderr
    assert f"job {waiting}: Held" in result.stdout  # the others are still done
    admin.ok("cancel", str(waiting))
