"""A volume's --size binds, through the API, with real jobs in their sandbox: the storage scan
records what each volume takes (ls and show say it); a job that fills a volume past its size
is stopped with a reason that says so, new jobs that mount it are refused (409 volume_full)
until it is under again, and its bytes count in the team's storage."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.platform import make_settings, refused, running_app, submit, wait_job
from tests.support.waiting import wait_for

API = "/api/v1"
FILL = "head -c 2000000 /dev/zero > /v/fill.bin; while true; do sleep 0.1; done"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    data = tmp_path_factory.mktemp("volume-size") / "data"
    with running_app(make_settings(data, storage_scan_seconds=0.2)) as running:
        yield running


def test_a_volume_past_its_size_stops_its_jobs_and_refuses_new_ones(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    made = client.post(f"{API}/volumes", json={"name": "small", "size_bytes": 1_000_000})
    assert made.status_code == 201, made.text
    roomy = client.post(f"{API}/volumes", json={"name": "roomy", "size_bytes": 10**9})
    assert roomy.status_code == 201, roomy.text
    # one job fills it; another job of the team, on another volume, runs on
    filler = submit(client, ["sh", "-c", FILL], volumes=["small:/v"])
    other = submit(client, ["sh", "-c", "while true; do sleep 0.1; done"], volumes=["roomy:/r"])
    wait_job(client, other["id"], {"running"})

    ended = wait_job(client, filler["id"], timeout=60)
    assert ended["status"] == "failed" and ended["reason"] == "StorageQuotaExceeded"
    # how much it takes: whatever the scan found the filler had written by then (>= 1 MB)
    said = re.search(
        r"volume small takes ([\d.]+) MiB, over its size of 976\.6 KiB", ended["message"]
    )
    assert said and float(said.group(1)) > 0.95, ended
    assert "stopping the jobs that mount it" in ended["message"]
    assert client.get(f"{API}/jobs/{other['id']}").json()["status"] == "running"

    listed = {v["name"]: v for v in client.get(f"{API}/volumes").json()}
    assert listed["small"]["used_bytes"] >= 2_000_000
    assert client.get(f"{API}/volumes/small").json()["used_bytes"] >= 2_000_000
    body = refused(
        client.post(f"{API}/jobs", json={"command": ["true"], "volumes": ["small:/v"]}),
        409,
        "volume_full",
    )
    assert "volume small of team default takes" in body["message"]
    assert "larger size" in body["message"]
    teams = {t["name"]: t for t in client.get(f"{API}/teams").json()}
    assert teams["default"]["storage"]["used"] >= 2_000_000  # the team's storage counts it

    # cleaned (here: by the admin, on the disk), the next scan lets jobs mount it again
    shutil.rmtree(platform.settings.volumes_dir / str(ended["spec"]["volumes"][0]["id"]))

    def mountable() -> bool:
        answer = client.post(f"{API}/jobs", json={"command": ["true"], "volumes": ["small:/v"]})
        return answer.status_code == 201

    wait_for(mountable, 20, "the volume to be mountable again")
    assert client.post(f"{API}/jobs/{other['id']}/cancel").status_code in (200, 202)
