"""Bounded cycles in the server, through the API (on SQLite and on PostgreSQL): a cycle starts
its jobs ``cycle_max_starts`` at a time as it goes, a job the cycle did not try, its user's
first jobs having failed ``cycle_max_tries`` times, says so, and reasons are worked out at
most every ``explain_interval_seconds``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.types import Clock, Decisions, HandOver, Snapshot
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.waiting import wait_for

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


class Recorded:
    """The real scheduler; each call's decisions kept, and the parts it handed over."""

    def __init__(self) -> None:
        self.calls: list[Decisions] = []
        self.parts: list[list[Decisions]] = []

    def __call__(
        self,
        snapshot: Snapshot,
        clock: Clock,
        state: SchedulerState | None = None,
        hand_over: HandOver | None = None,
    ) -> Decisions:
        parts: list[Decisions] = []

        def record(part: Decisions) -> None:
            parts.append(part)
            assert hand_over is not None
            hand_over(part)

        decisions = schedule(snapshot, clock, state, record if hand_over else None)
        self.calls.append(decisions)
        self.parts.append(parts)
        return decisions


@pytest.fixture
def bounded(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Recorded]]:
    """4 declared A100s; a cycle starts at most two jobs and tries one that cannot start."""
    settings = make_settings(tmp_path / "data", database_url, cycle_max_starts=2, cycle_max_tries=1)
    recorded = Recorded()
    with running_app(settings, decide=recorded) as (client, _platform):
        yield client, recorded


def test_a_cycle_starts_its_jobs_max_starts_at_a_time_as_it_goes(
    bounded: tuple[TestClient, Recorded],
) -> None:
    client, recorded = bounded
    holder = submit(client, SLEEP, resources={"gpus": 4})
    wait_job(client, holder["id"], {"running"})
    jobs = [submit(client, SLEEP, resources={"gpus": 1}) for _ in range(3)]
    calls = len(recorded.calls)

    assert client.post(f"/api/v1/jobs/{holder['id']}/cancel").status_code == 200
    for job in jobs:
        wait_job(client, job["id"], {"running"})

    cycle = next(i for i in range(calls, len(recorded.calls)) if recorded.parts[i])
    (part,) = recorded.parts[cycle]  # two jobs handed over at once, the third returned
    placed = [p.job_id for p in part.placements] + [
        p.job_id for p in recorded.calls[cycle].placements
    ]
    assert len(part.placements) == 2 and sorted(placed) == [job["id"] for job in jobs]


def test_a_job_not_tried_says_what_it_waits_behind(bounded: tuple[TestClient, Recorded]) -> None:
    client, _ = bounded
    holder = submit(client, SLEEP, resources={"gpus": 3})
    wait_job(client, holder["id"], {"running"})
    big = submit(client, SLEEP, resources={"gpus": 2})
    small = submit(client, SLEEP, resources={"gpus": 1})

    def queued() -> dict | None:
        answer = client.get(f"/api/v1/jobs/{small['id']}/why").json()
        # ("Queued" too, "waiting for the scheduler", until a cycle explains it)
        return answer if answer["message"].startswith("not tried") else None

    answer = wait_for(queued, 30.0, "the small job to be explained", 0.05)
    assert answer["status"] == "pending"
    assert answer["message"] == (
        f"not tried in this cycle: 1 job of user admin ahead of it could not start (job "
        f"{big['id']} first), and a cycle tries no more of a user's jobs after that many; it is "
        "tried as those start or leave"
    )
    assert answer["position"] == 2
    # its turn comes once the job ahead starts
    assert client.post(f"/api/v1/jobs/{holder['id']}/cancel").status_code == 200
    wait_job(client, big["id"], {"running"})
    wait_job(client, small["id"], {"running"})


class Seen(Recorded):
    """The real scheduler; whether each call was asked to explain, and its decisions."""

    def __init__(self) -> None:
        super().__init__()
        self.explained: list[bool] = []

    def __call__(
        self,
        snapshot: Snapshot,
        clock: Clock,
        state: SchedulerState | None = None,
        hand_over: HandOver | None = None,
    ) -> Decisions:
        self.explained.append(snapshot.explain)
        return super().__call__(snapshot, clock, state, hand_over)


def test_reasons_are_worked_out_at_most_every_explain_interval(
    tmp_path: Path, database_url: str
) -> None:
    settings = make_settings(tmp_path / "data", database_url, explain_interval_seconds=3600)
    seen = Seen()
    with running_app(settings, decide=seen) as (client, _platform):
        holder = submit(client, SLEEP, resources={"gpus": 4})
        wait_job(client, holder["id"], {"running"})
        first = submit(client, SLEEP, resources={"gpus": 1})
        calls = len(seen.calls)
        wait_for(lambda: len(seen.calls) > calls + 2 or None, 30.0, "more cycles", 0.05)

        assert seen.explained[0] is True  # the first cycle explains
        assert not any(seen.explained[calls:])  # within the hour, none does again
        assert all(decisions.pending == {} for decisions in seen.calls[calls:])
        answer = client.get(f"/api/v1/jobs/{first['id']}/why").json()
        assert (answer["status"], answer["code"], answer["message"]) == (
            "pending",
            "Queued",
            "waiting for the scheduler",  # as submitted: not explained yet
        )
