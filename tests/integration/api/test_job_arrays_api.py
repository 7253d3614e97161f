"""Job arrays through the API in-process, on SQLite and PostgreSQL, with real runner processes:
one request queues every task, each task sees its index, ``%N`` holds the rest back, and the
array is listed and cancelled as one or task by task."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, refused, running_app, wait_for, wait_job

SHOW_ARRAY = [
    sys.executable,
    "-c",
    "import os; e = os.environ; "
    "print(e['GPUPOOL_ARRAY_ID'], e['GPUPOOL_ARRAY_INDEX'], e['GPUPOOL_ARRAY_TASK_COUNT'])",
]
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    settings = make_settings(tmp_path / "data", database_url, max_array_tasks=50)
    with running_app(settings) as (client, _platform):
        yield client


def submit_array(client: TestClient, command: list[str], array: dict, **fields: object) -> dict:
    response = client.post("/api/v1/jobs", json={"command": command, "array": array, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def tasks_of(client: TestClient, array_id: int) -> list[dict]:
    return client.get("/api/v1/jobs", params={"array": array_id}).json()


def test_one_request_queues_every_task_and_each_sees_its_index(client: TestClient) -> None:
    array = submit_array(client, SHOW_ARRAY, {"indexes": "1,3,5"}, name="sweep")

    assert (array["id"], array["indexes"], array["size"]) == (array["job_ids"][0], "1-5:2", 3)
    assert array["counts"] == {"pending": 3} and array["max_running"] is None
    for job_id, index in zip(array["job_ids"], [1, 3, 5], strict=True):
        done = wait_job(client, job_id)
        assert done["status"] == "succeeded", done["message"]
        assert (done["array_id"], done["array_index"], done["name"]) == (
            array["id"],
            index,
            "sweep",
        )
        log = client.get(f"/api/v1/jobs/{job_id}/logs").json()["text"]
        assert log.split() == [str(array["id"]), str(index), "3"]
        assert [e["reason"] for e in done["events"]][:2] == ["Submitted", "Placed"]
    shown = client.get(f"/api/v1/jobs/arrays/{array['id']}").json()
    assert shown["counts"] == {"succeeded": 3}


def test_at_most_max_running_tasks_run_at_once_and_the_rest_say_why(
    client: TestClient, exchange: Path
) -> None:
    wait_release = [
        sys.executable,
        "-c",
        "import os, time\nwhile not os.path.exists('release'): time.sleep(0.05)",
    ]
    array = submit_array(client, wait_release, {"indexes": "0-3%2"}, workdir=str(exchange))
    assert array["max_running"] == 2 and array["indexes"] == "0-3"

    def two_running_two_held() -> list[dict] | None:
        tasks = tasks_of(client, array["id"])
        statuses = sorted(t["status"] for t in tasks)
        held = [t for t in tasks if t["reason"] == "ArrayLimit"]
        return (
            tasks
            if statuses == ["pending", "pending", "running", "running"] and len(held) == 2
            else None
        )

    tasks = wait_for(two_running_two_held, 30, "two tasks running and two held back")
    held = [t for t in tasks if t["status"] == "pending"][0]
    assert held["message"] == (
        f"array {array['id']} runs at most 2 of its tasks at once (%2) and that many are "
        "starting or running; this task starts when one of them ends"
    )
    (exchange / "release").touch()
    for job_id in array["job_ids"]:
        assert wait_job(client, job_id)["status"] == "succeeded"
    assert most_at_once(client, array["job_ids"]) == 2


def most_at_once(client: TestClient, job_ids: list[int]) -> int:
    """The most tasks that held resources at once, from their events in the order recorded:
    from each task's placement to its end."""
    changes: list[tuple[int, int]] = []
    for job_id in job_ids:
        events = client.get(f"/api/v1/jobs/{job_id}/events").json()
        placed = [e["id"] for e in events if e["reason"] == "Placed"]
        assert len(placed) == 1, events
        changes += [(placed[0], 1), (events[-1]["id"], -1)]
    holding = most = 0
    for _, change in sorted(changes):
        holding += change
        most = max(most, holding)
    return most


def test_cancelling_the_array_cancels_every_task_not_ended(client: TestClient) -> None:
    array = submit_array(client, SLEEP, {"indexes": [0, 1, 2], "max_running": 1})
    first = wait_job(client, array["job_ids"][0], {"running"})

    answer = client.post(f"/api/v1/jobs/arrays/{array['id']}/cancel")

    assert answer.status_code == 200, answer.text
    assert answer.json()["counts"] == {"running": 1, "cancelled": 2}
    assert wait_job(client, first["id"])["status"] == "cancelled"
    events = client.get(f"/api/v1/jobs/{array['job_ids'][2]}/events").json()
    assert [e["reason"] for e in events][-2:] == ["CancelRequested", "Cancelled"]
    again = client.post(f"/api/v1/jobs/arrays/{array['id']}/cancel")
    assert again.status_code == 200 and again.json()["counts"] == {"cancelled": 3}


def test_one_task_is_found_by_its_index_and_cancelled_alone(client: TestClient) -> None:
    array = submit_array(client, SLEEP, {"indexes": "4-6%1"})
    task = client.get(f"/api/v1/jobs/arrays/{array['id']}/tasks/6").json()
    assert (task["id"], task["array_index"]) == (array["job_ids"][2], 6)

    cancelled = client.post(f"/api/v1/jobs/{task['id']}/cancel").json()

    assert cancelled["status"] == "cancelled"
    counts = client.get(f"/api/v1/jobs/arrays/{array['id']}").json()["counts"]
    assert counts.get("cancelled") == 1 and sum(counts.values()) == 3
    missing = client.get(f"/api/v1/jobs/arrays/{array['id']}/tasks/7")
    assert "its indexes are 4-6" in refused(missing, 404, "not_found")["message"]
    client.post(f"/api/v1/jobs/arrays/{array['id']}/cancel")


def test_arrays_are_listed_as_one_and_their_tasks_on_request(client: TestClient) -> None:
    single = client.post("/api/v1/jobs", json={"command": SLEEP, "resources": {"gpus": 4}})
    array = submit_array(client, ["true"], {"indexes": "0-2"}, resources={"gpus": 4})

    listed = client.get("/api/v1/jobs/arrays", params={"status": "pending"}).json()
    alone = client.get("/api/v1/jobs", params={"array_tasks": "false"}).json()
    tasks = tasks_of(client, array["id"])

    assert [(a["id"], a["size"]) for a in listed] == [(array["id"], 3)]
    assert [job["id"] for job in alone] == [single.json()["id"]]
    assert [t["array_index"] for t in tasks] == [0, 1, 2]
    client.post(f"/api/v1/jobs/{single.json()['id']}/cancel")
    client.post(f"/api/v1/jobs/arrays/{array['id']}/cancel")


@pytest.mark.parametrize(
    ("array", "says"),
    [
        ({"indexes": "5-2"}, "counts down"),
        ({"indexes": "a-b"}, "sbatch --array"),
        ({"indexes": "0-9%0"}, "at least %1"),
        ({"indexes": []}, "at least one task"),
        ({"indexes": [2_000_000]}, "out of range"),
        ({"indexes": "0-9%2", "max_running": 3}, "give the limit once"),
        ({"indexes": "0-9", "max_running": 0}, "sbatch --array"),
        ({"indexes": {"from": 1}}, "sbatch --array"),
        ({"indexes": "0-50"}, "at most 50 in one array"),
    ],
)
def test_malformed_arrays_are_refused_with_invalid_array(
    client: TestClient, array: dict, says: str
) -> None:
    answer = client.post("/api/v1/jobs", json={"command": ["true"], "array": array})

    assert says in refused(answer, 422, "invalid_array")["message"]
    assert client.get("/api/v1/jobs", params={"status": "pending"}).json() == []
