"""The control loop carries the scheduler's nominations from one cycle to the next (in
memory), and a job's nomination ends with it, as the pending reason says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.types import Clock, Decisions, HandOver, Nomination, Snapshot
from gpupool.services.platform import Platform
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.waiting import wait_for


class Nominator:
    """The real scheduler; while ``holding``, every pending job is kept pending and nominated
    (to a node the pool lacks, which the scheduler itself would drop). Notes every snapshot's
    nominations."""

    def __init__(self) -> None:
        self.holding = True
        self.given: list[dict[int, Nomination]] = []

    def __call__(
        self, snapshot: Snapshot, clock: Clock, state: SchedulerState, hand_over: HandOver | None
    ) -> Decisions:
        self.given.append(dict(snapshot.nominations))
        decisions = schedule(snapshot, clock, state, hand_over)
        if self.holding:
            decisions.placements = []
            for job in snapshot.pending:
                decisions.nominations[job.job_id] = nominated(job.job_id)
        return decisions


def nominated(job_id: int) -> Nomination:
    return Nomination(job_id, (("node-x", (0, 1)),), 1.0)


@pytest.fixture
def nominator() -> Nominator:
    return Nominator()


@pytest.fixture
def app(tmp_path: Path, nominator: Nominator) -> Iterator[tuple[TestClient, Platform]]:
    with running_app(make_settings(tmp_path / "data"), decide=nominator) as running:
        yield running


def test_nominations_reach_the_next_snapshot_and_end_when_the_job_starts(
    app: tuple[TestClient, Platform], nominator: Nominator
) -> None:
    client, platform = app
    job = submit(client, ["true"], resources={"gpus": 1})
    platform.loop.wake()

    expected = {job["id"]: nominated(job["id"])}
    wait_for(lambda: expected in nominator.given or None, 30, "the nomination in a snapshot")
    assert platform.loop.nominations == expected

    nominator.holding = False
    platform.loop.wake()
    done = wait_job(client, job["id"], timeout=30)
    assert done["status"] == "succeeded"
    wait_for(lambda: platform.loop.nominations == {} or None, 30, "the nomination to end")
