"""Volumes through the API, in process, with real jobs in their sandbox: a team's volume made,
listed and shown; mounted read-write by one job and read by the next; counted in the team's
storage quota; its deletion refused while a job mounts it, then its files gone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.platform import make_settings, refused, running_app, submit, wait_job
from tests.support.waiting import wait_for

API = "/api/v1"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    data = tmp_path_factory.mktemp("volumes") / "data"
    with running_app(make_settings(data, storage_scan_seconds=0.2)) as running:
        yield running


def log(client: TestClient, job_id: int) -> str:
    return client.get(f"{API}/jobs/{job_id}/logs").json()["text"]


def test_a_volume_keeps_what_one_job_writes_for_the_next(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    made = client.post(f"{API}/volumes", json={"name": "scratch", "size_bytes": 10**9})
    assert made.status_code == 201, made.text
    assert (made.json()["team"], made.json()["size_limit_bytes"]) == ("default", 10**9)

    write = 'echo "at=$GPUPOOL_VOLUME_SCRATCH"; head -c 300000 /dev/zero > /scratch/state.bin'
    first = submit(client, ["sh", "-c", write], volumes=["scratch:/scratch"])
    assert wait_job(client, first["id"])["status"] == "succeeded", log(client, first["id"])
    second = submit(client, ["sh", "-c", "wc -c < /mnt/s/state.bin"], volumes=["scratch:/mnt/s"])
    assert wait_job(client, second["id"])["status"] == "succeeded"

    assert "at=/scratch" in log(client, first["id"])
    assert log(client, second["id"]).strip() == "300000"
    assert first["spec"]["volumes"][0]["id"] is not None
    assert [v["name"] for v in client.get(f"{API}/volumes").json()] == ["scratch"]
    assert client.get(f"{API}/volumes/scratch").json()["used_bytes"] >= 300000
    refused(client.post(f"{API}/volumes", json={"name": "scratch"}), 409, "volume_exists")

    def counted() -> int | None:  # the storage scan sums the volume with the team's files
        teams = {t["name"]: t for t in client.get(f"{API}/teams").json()}
        used = teams["default"]["storage"]["used"] or 0
        return used if used >= 300000 else None

    wait_for(counted, 20, "the volume's bytes in the team's storage")


def test_a_volume_a_running_job_mounts_is_not_deleted(app: tuple[TestClient, Platform]) -> None:
    client, platform = app
    client.post(f"{API}/volumes", json={"name": "busy"})
    job = submit(client, ["sh", "-c", "echo x > /busy/f; sleep 300"], volumes=["busy:/busy"])
    wait_job(client, job["id"], {"running"})

    body = refused(client.delete(f"{API}/volumes/busy"), 409, "volume_in_use")

    assert body["details"]["jobs"] == [job["id"]]
    client.post(f"{API}/jobs/{job['id']}/cancel")
    wait_job(client, job["id"])
    assert client.delete(f"{API}/volumes/busy").status_code == 204
    assert not any(p.name for p in platform.settings.volumes_dir.glob("*") if (p / "f").exists())
    refused(client.get(f"{API}/volumes/busy"), 404, "not_found")


def test_bad_volumes_are_refused_at_submit(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    for bad, status in (
        (["nothing:/x"], 404),
        (["scratch"], 422),
        (["scratch:/proc"], 422),
        (["scratch:/a", "scratch:/a/b"], 422),
    ):
        answer = client.post(f"{API}/jobs", json={"command": ["true"], "volumes": bad})
        assert answer.status_code == status, (bad, answer.text)
    both = {"command": ["true"], "volumes": ["scratch:/d"], "datasets": ["x:/d"]}
    assert client.post(f"{API}/jobs", json=both).status_code == 422
    refused(client.post(f"{API}/volumes", json={"name": "bad name"}), 422, "invalid_dataset_name")
