"""`gpupool queue` through the real CLI against a real server (4 declared A100s)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import FINAL, Cli, hold, wait_for, wait_status


def queued(cli: Cli, job_ids: list[int]) -> dict:
    """``gpupool queue -o json`` once the scheduler has queued and estimated all ``job_ids``."""

    def ready() -> dict | None:
        answer = cli.json("queue")
        found = {job["id"]: job for team in answer["teams"] for job in team["jobs"]}
        settled = all(
            i in found and found[i]["position"] and found[i]["eta"] is not None for i in job_ids
        )
        return answer if settled else None

    return wait_for(ready, 90.0, f"jobs {job_ids} to be queued")


def rows(printed: str) -> dict[int, list[str]]:
    """The job rows of the table, by job id: each row's words (POS ID NAME USER GPUS REASON ...)."""
    words = [line.split() for line in printed.splitlines()]
    return {int(w[1]): w for w in words if len(w) > 5 and w[1].isdigit()}


def test_an_empty_queue_says_that_no_job_waits(admin: Cli) -> None:
    assert admin.json("queue")["teams"] == []
    printed = admin.ok("queue")
    assert printed.strip() == "No job is waiting: every job submitted so far has started or ended."
    assert admin.ok("queue", "--team", "default").strip() == "No job of team default is waiting."


def test_queue_lists_waiting_jobs_by_team_with_reason_position_and_eta(
    admin: Cli, release: Path, exchange: Path
) -> None:
    holder = admin.submit(
        "--gpus", "4", "--max-runtime", "1h", "--workdir", str(exchange), *hold(release)
    )
    wait_status(admin, holder, {"running"})
    first = admin.submit("--gpus", "2", "--name", "first", "--max-runtime", "10m", "--", "true")
    second = admin.submit("--gpus", "1", "--name", "second", "--max-runtime", "10m", "--", "true")
    answer = queued(admin, [first, second])
    assert [team["team"] for team in answer["teams"]] == ["default"]

    printed = admin.ok("queue")
    lines = printed.splitlines()
    assert lines[0] == "2 jobs waiting in 1 team"
    assert "position 1 is the next job of that team to start" in lines[1]
    assert lines[2].startswith("ETA is an estimated start")
    assert "team default: 2 waiting" in lines
    header = next(line for line in lines if line.startswith("POS"))
    assert header.split() == ["POS", "ID", "NAME", "USER", "GPUS", "REASON", "MESSAGE", "ETA"]
    table = rows(printed)
    assert table[first][:6] == ["1", str(first), "first", "admin", "2", "InsufficientGpus"]
    assert table[second][:6] == ["2", str(second), "second", "admin", "1", "InsufficientGpus"]
    assert table[first][-2] == "in" and table[second][-2] == "in"
    assert holder not in table

    assert "team default: 2 waiting" in admin.ok("queue", "--team", "default")
    assert admin.ok("queue", "--team", "nope").strip() == "No job of team nope is waiting."
    assert admin.json("queue", "--team", "nope")["teams"] == []

    admin.ok("cancel", str(first), str(second))
    release.touch()
    wait_status(admin, holder, FINAL)
