"""The scheduler's live settings through the API, on SQLite and PostgreSQL: the environment's
until an admin makes a version, each change numbered with who, when and why, handed to the
control loop at once and read again by a restarted server; stale and empty changes refused
with 409, bad knobs with 422, rollback to any version (0: the environment's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.platform import make_settings, refused, running_app, submit, wait_job

CONFIG = "/api/v1/scheduler/config"
DEFAULT_LEVELS = [1800.0, 36000.0, 360000.0]


def live_policy(platform: Platform):  # noqa: ANN201 - the loop's Policy
    """The policy the control loop's next snapshot (and the start estimates') will use."""
    policy = platform.loop.snapshots.policy
    assert platform.loop.etas.builder.policy == policy
    return policy


def change(client: TestClient, **body: object) -> dict:
    answer = client.put(CONFIG, json={"reason": "test", **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_environment_gives_the_settings_until_an_admin_changes_them(
    tmp_path: Path, database_url: str
) -> None:
    settings = make_settings(tmp_path / "data", database_url, min_runtime_seconds=120.0)
    with running_app(settings) as (client, platform):
        shown = client.get(CONFIG).json()
        assert shown["version"] == 0 and shown["live"] is None
        assert shown["knobs"] == shown["environment"]
        assert shown["knobs"]["las_thresholds"] == DEFAULT_LEVELS
        assert shown["knobs"]["min_runtime"] == 120.0  # GPUPOOL_MIN_RUNTIME_SECONDS

        made = change(
            client,
            las_thresholds=[3600, 72000, 720000],
            starvation_factor=4,
            reason="long jobs dominate: demote later",
        )

        assert made["version"] == 1
        assert made["knobs"]["las_thresholds"] == [3600.0, 72000.0, 720000.0]
        assert made["knobs"]["min_runtime"] == 120.0, "a knob not given keeps its value"
        live = made["live"]
        assert live["changed"] == ["las_thresholds", "starvation_factor"]
        assert (live["source"], live["created_by"]) == ("admin", "admin")
        assert live["reason"] == "long jobs dominate: demote later"
        assert made["environment"]["las_thresholds"] == DEFAULT_LEVELS
        policy = live_policy(platform)
        assert policy.las_thresholds == (3600.0, 72000.0, 720000.0)
        assert (policy.starvation_factor, policy.min_runtime) == (4.0, 120.0)
        assert policy.max_starts == settings.cycle_max_starts, "what is not a knob stays"

    with running_app(settings) as (client, platform):  # a restart reads the live version
        assert client.get(CONFIG).json()["version"] == 1
        assert live_policy(platform).las_thresholds == (3600.0, 72000.0, 720000.0)


def test_history_says_what_each_version_changed_and_rollback_restores_any(
    tmp_path: Path, database_url: str
) -> None:
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, platform):
        change(client, usage_half_life=86400, reason="one day")
        change(client, packing="best-fit", placement_charge=0, reason="try best fit")

        back = client.post(f"{CONFIG}/rollback", json={"version": 1, "reason": "fgd was better"})
        assert back.status_code == 200, back.text
        assert back.json()["version"] == 3
        assert back.json()["knobs"]["packing"] == "fgd"
        assert live_policy(platform).usage_half_life == 86400.0
        assert platform.loop.snapshots.usage.half_life == 86400.0, "usage decays by it"

        history = client.get(f"{CONFIG}/history").json()
        assert [v["version"] for v in history] == [3, 2, 1]
        assert [v["changed"] for v in history] == [
            ["placement_charge", "packing"],
            ["placement_charge", "packing"],
            ["usage_half_life"],
        ]
        assert [v["source"] for v in history] == ["rollback", "admin", "admin"]
        assert history[0]["rollback_of"] == 1 and history[0]["reason"] == "fgd was better"
        assert [v["version"] for v in client.get(f"{CONFIG}/history?limit=1").json()] == [3]

        to_environment = client.post(f"{CONFIG}/rollback", json={"version": 0, "reason": "all"})
        assert to_environment.json()["knobs"] == to_environment.json()["environment"]
        assert to_environment.json()["live"]["rollback_of"] == 0
        refused(
            client.post(f"{CONFIG}/rollback", json={"version": 9, "reason": "x"}), 404, "not_found"
        )


def test_a_stale_or_empty_change_is_refused_and_changes_nothing(
    tmp_path: Path, database_url: str
) -> None:
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, platform):
        change(client, min_runtime=600, if_version=0)

        stale = client.put(CONFIG, json={"min_runtime": 60, "reason": "x", "if_version": 0})
        error = refused(stale, 409, "settings_changed")
        assert "version 1 is" in error["message"] and "read them again" in error["message"]
        same = client.put(CONFIG, json={"min_runtime": 600, "reason": "again"})
        refused(same, 409, "settings_unchanged")
        back = {"version": 1, "reason": "x", "if_version": 0}
        refused(client.post(f"{CONFIG}/rollback", json=back), 409, "settings_changed")
        assert client.get(CONFIG).json()["version"] == 1
        assert live_policy(platform).min_runtime == 600.0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"las_thresholds": [36000, 1800]}, "las_thresholds"),
        ({"las_thresholds": [0, 1800]}, "las_thresholds"),
        ({"las_thresholds": []}, "las_thresholds"),
        ({"min_runtime": -1}, "min_runtime"),
        ({"usage_half_life": 1}, "usage_half_life"),
        ({"packing": "worst-fit"}, "packing"),
        ({"starvation_factor": "often"}, "starvation_factor"),
        ({"max_starts": 5}, "max_starts"),  # not a knob of the record
        ({"reason": ""}, "reason"),
    ],
)
def test_a_bad_knob_is_refused_naming_it(
    tmp_path: Path, body: dict[str, object], field: str
) -> None:
    with running_app(make_settings(tmp_path / "data")) as (client, _):
        error = refused(client.put(CONFIG, json={"reason": "bad", **body}), 422, "invalid_request")
        assert field in str(error["details"]), error
        assert client.get(CONFIG).json()["version"] == 0


def test_a_missing_reason_or_a_nan_is_refused_and_a_wrong_order_says_how(tmp_path: Path) -> None:
    with running_app(make_settings(tmp_path / "data")) as (client, _):
        refused(client.put(CONFIG, json={"min_runtime": 5}), 422, "invalid_request")
        raw = '{"min_runtime": NaN, "reason": "x"}'
        nan = client.put(CONFIG, content=raw, headers={"content-type": "application/json"})
        refused(nan, 422, "invalid_request")
        wrong = client.put(CONFIG, json={"las_thresholds": [5, 4], "reason": "x"})
        message = refused(wrong, 422, "invalid_request")["message"]
        assert message.startswith("las_thresholds:") and "lowest first" in message


def test_the_gittins_order_is_drawn_from_the_finished_jobs_service(
    tmp_path: Path, database_url: str
) -> None:
    """With order gittins the snapshot carries the GPU-seconds the finished jobs received
    over all their attempts (without it the order is first come, first served in a level)."""
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, platform):
        for seconds in ("0.2", "0.4"):
            job = submit(client, ["sleep", seconds], resources={"gpus": 2})
            wait_job(client, job["id"])
        with platform.db.reader() as session:
            assert platform.loop.snapshots.build(session).service is None, "las: not read"
        change(client, order="gittins", reason="many jobs of one size")

        with platform.db.reader() as session:
            service = platform.loop.snapshots.build(session).service

        assert service is not None and len(service) == 2
        assert 2 * 0.2 <= service.samples[0] < 2 * 0.2 + 2 and service.samples[1] >= 2 * 0.4
