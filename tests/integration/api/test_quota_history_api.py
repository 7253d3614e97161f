"""The teams' history under the quotas and pool size of its time, on SQLite and PostgreSQL:
a guarantee changed, or GPUs added, halfway through the window shows in the later buckets
only; a database without records falls back to today's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from gpupool.discovery import discover_node
from gpupool.scheduler import SchedulerState
from gpupool.scheduler.types import Clock, Decisions, HandOver, Snapshot
from gpupool.services.platform import Platform
from gpupool.store.models import PoolChangeModel, QuotaChangeModel
from tests.support.clock import ManualClock
from tests.support.platform import make_settings, running_app, submit
from tests.support.waiting import wait_for

HALF_HOUR = 1800.0
TEAMS = "/api/v1/teams"


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Platform, ManualClock]]:
    """4 declared A100s; team ml guaranteed 3; ml and default each wait for 4 GPUs (the
    scheduler decides nothing, so both jobs stay pending through the window)."""

    def hold(
        _snapshot: Snapshot, _clock: Clock, _state: SchedulerState, _hand_over: HandOver | None
    ) -> Decisions:
        return Decisions()

    clock = ManualClock(1_800_000_000.0)
    settings = make_settings(tmp_path / "data", database_url)
    with running_app(settings, decide=hold, clock=clock) as (client, platform):
        created = client.post(TEAMS, json={"name": "ml", "guarantee": {"*": 3}})
        assert created.status_code == 201, created.text
        for team in ("ml", "default"):
            submit(client, ["true"], team=team, resources={"gpus": 4})
        yield client, platform, clock


def history(client: TestClient) -> dict[str, dict]:
    """The last hour in four buckets of 15 minutes, by team."""
    answer = client.get(f"{TEAMS}/history", params={"hours": 1, "buckets": 4})
    assert answer.status_code == 200, answer.text
    return {team["team"]: team for team in answer.json()["teams"]}


def test_a_changed_guarantee_shows_from_its_change_on(app) -> None:  # noqa: ANN001
    client, _platform, clock = app
    clock.advance(HALF_HOUR)
    lowered = client.put(f"{TEAMS}/ml/quota", json={"guarantee": {"*": 1}})
    assert lowered.status_code == 200, lowered.text
    clock.advance(HALF_HOUR)

    teams = history(client)
    ml, default = teams["ml"], teams["default"]
    assert ml["demand"] == default["demand"] == [4, 4, 4, 4]
    assert ml["guarantees"] == [3, 3, 1, 1] and ml["guarantee"] == 1
    assert default["guarantees"] == [0, 0, 0, 0]
    # 4 GPUs: the guarantee first, the rest halved between two teams of weight 1
    assert ml["fair"] == [3.5, 3.5, 2.5, 2.5] and ml["fair_now"] == 2.5
    assert default["fair"] == [0.5, 0.5, 1.5, 1.5] and default["fair_now"] == 1.5


def test_gpus_added_to_the_pool_show_from_their_arrival_on(app) -> None:  # noqa: ANN001
    client, platform, clock = app
    clock.advance(HALF_HOUR)
    grown = platform.settings.model_copy(update={"declared_gpus": "6xA100-SXM4-80GB:80GiB"})
    platform.watcher.discover = lambda _settings: discover_node(grown)
    assert platform.watcher.refresh() is True
    clock.advance(HALF_HOUR)

    def pool() -> float | None:  # the API reads nodes through a cache of up to a second
        found = client.get(f"{TEAMS}/history", params={"hours": 1}).json()["pool_gpus"]
        return found if found == 6 else None

    wait_for(pool, 10, "the API to see 6 GPUs")
    teams = history(client)
    # 6 GPUs: ml 3 guaranteed, then 1 more up to its demand; default the other 2
    assert teams["ml"]["fair"] == [3.5, 3.5, 4, 4]
    assert teams["default"]["fair"] == [0.5, 0.5, 2, 2]


def test_without_records_the_history_uses_todays_quotas_and_pool(app) -> None:  # noqa: ANN001
    client, platform, clock = app
    clock.advance(HALF_HOUR)
    client.put(f"{TEAMS}/ml/quota", json={"guarantee": {"*": 1}})
    with platform.db.session() as session:  # a database from before the records
        session.execute(delete(QuotaChangeModel))
        session.execute(delete(PoolChangeModel))
    clock.advance(HALF_HOUR)

    ml = history(client)["ml"]
    assert ml["guarantees"] == [1, 1, 1, 1]
    assert ml["fair"] == [2.5, 2.5, 2.5, 2.5]
