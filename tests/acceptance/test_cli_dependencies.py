"""A pipeline with no script: `gpupool run --after` chains prep -> train -> eval through the
real CLI against a real server; each step starts only once the one before succeeded, `why`
and `show` say what it waits for, and a failed step cancels the steps after it."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import FINAL, Cli, hold, refused, wait_for


def job(admin: Cli, job_id: int) -> dict:
    return admin.json("show", str(job_id))


def ended(admin: Cli, job_id: int) -> dict:
    return wait_for(
        lambda: (found := job(admin, job_id))["status"] in FINAL and found,
        what=f"job {job_id} to end",
    )


def test_a_three_step_pipeline_runs_in_order(admin: Cli, release: Path) -> None:
    work = str(release.parent)
    prep = int(
        admin.ok(
            "run", "--name", "prep", "--workdir", work,
            *hold(release, before="echo prepared > data.txt; "),
        )
    )  # fmt: skip
    train = int(
        admin.ok(
            "run", "--name", "train", "--after", "prep", "--workdir", work,
            "--", "sh", "-c", "cat data.txt > model.txt && echo trained >> model.txt",
        )
    )  # fmt: skip
    evaluate = int(
        admin.ok(
            "run", "--name", "eval", "--after", f"afterok:{train}", "--workdir", work,
            "--", "cat", "model.txt",
        )
    )  # fmt: skip

    why = admin.ok("why", str(train))
    assert "reason:     Dependency" in why
    assert f"waits for job {prep} (prep) to succeed" in why
    shown = admin.ok("show", str(evaluate))
    assert f"after:      afterok:{train}" in shown
    assert job(admin, train)["spec"]["depends_on"] == [{"job": prep, "condition": "afterok"}]

    release.touch()
    assert ended(admin, evaluate)["status"] == "succeeded"
    assert admin.ok("logs", str(evaluate)) == "prepared\ntrained\n"
    starts = [job(admin, j)["started_at"] for j in (prep, train, evaluate)]
    ends = [job(admin, j)["ended_at"] for j in (prep, train)]
    assert ends[0] <= starts[1] and ends[1] <= starts[2]


def test_a_failed_step_cancels_the_rest_and_afternotok_cleans_up(admin: Cli) -> None:
    prep = int(admin.ok("run", "--", "false"))
    train = int(admin.ok("run", "--after", str(prep), "--", "true"))
    cleanup = int(admin.ok("run", "--after", f"afternotok:{prep}", "--", "echo", "cleaned"))
    always = int(admin.ok("run", "--after", f"afterany:{train}", "--", "true"))
    cancelled = ended(admin, train)
    assert (cancelled["status"], cancelled["reason"]) == ("cancelled", "DependencyNeverSatisfied")
    why = admin.ok("why", str(train))
    assert "DependencyNeverSatisfied" in why and f"job {prep} ended failed" in why
    assert ended(admin, cleanup)["status"] == "succeeded"
    assert admin.ok("logs", str(cleanup)) == "cleaned\n"
    assert ended(admin, always)["status"] == "succeeded"


def test_an_unknown_job_is_refused(admin: Cli) -> None:
    answer = admin("run", "--after", "no-such-step", "--", "true")
    assert (
        refused(answer, "unknown_dependency")
        and "no job of this team is named 'no-such-step'" in answer.stderr
    )
