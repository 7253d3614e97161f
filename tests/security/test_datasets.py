"""Hostile use of datasets and volumes: a member of another team lists, shows, guesses by
name, uploads into, commits to, deletes and mounts a team's dataset or volume; names a
blob another team holds without having its bytes; forges the manifest a job records; a job
writes into the dataset it reads; a manifest climbs out of its version. Everything is
refused (404 for what another team cannot see) and nothing leaks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from gpupool.domain.datasets import ManifestFile, blob_relpath, manifest_bytes
from gpupool.services.datasets import collect_blobs
from gpupool.store.models import VolumeModel
from tests.support.platform import make_settings, refused, running_app, wait_job

API = "/api/v1"
SECRET = b"vision-team-labels-5c1e\n"
USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_of(files: dict[str, bytes]) -> bytes:
    return manifest_bytes([ManifestFile(p, len(d), 0o644, sha(d)) for p, d in files.items()])


def upload(client: TestClient, headers: dict, name: str, files: dict[str, bytes]) -> dict:
    manifest = manifest_of(files)
    for blob in [manifest, *files.values()]:
        put = client.put(f"{API}/dataset-blobs/{sha(blob)}", content=blob, headers=headers)
        assert put.status_code == 200, put.text
    made = client.post(
        f"{API}/datasets/{name}/versions", json={"manifest": sha(manifest)}, headers=headers
    )
    assert made.status_code == 201, made.text
    return made.json()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Teams vision and audio, a member of each and a viewer of vision; vision has a dataset
    holding a secret and a volume; audio has a dataset of its own."""
    data = tmp_path_factory.mktemp("hostile-datasets") / "data"
    with running_app(make_settings(data)) as (admin, platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        vision = upload(admin, headers["vic"], "labels", {"labels.txt": SECRET})
        own = upload(admin, headers["ada"], "audio-set", {"a.wav": b"RIFF"})
        made = admin.post(f"{API}/volumes", json={"name": "vision-scratch"}, headers=headers["vic"])
        assert made.status_code == 201, made.text
        yield {"client": admin, "platform": platform, "headers": headers} | {
            "vision": vision,
            "own": own,
        }


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get(f"{API}/teams").json()}:
        assert admin.post(f"{API}/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post(f"{API}/users", json=body).status_code == 201
    token = admin.post(f"{API}/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def test_another_team_cannot_list_show_or_guess_a_dataset(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]

    assert [d["name"] for d in client.get(f"{API}/datasets", headers=ada).json()] == ["audio-set"]
    by_team = client.get(f"{API}/datasets", params={"team": "vision"}, headers=ada)
    assert by_team.json() == []
    refused(client.get(f"{API}/datasets/labels", headers=ada), 404, "not_found")
    for params in ({}, {"team": "vision"}):
        shown = client.get(f"{API}/datasets/labels/versions/1", params=params, headers=ada)
        refused(shown, 404, "not_found")
        assert SECRET.decode() not in shown.text and sha(SECRET) not in shown.text
    assert client.get(f"{API}/datasets/labels", headers=world["headers"]["val"]).status_code == 200


def test_another_team_cannot_upload_into_commit_to_or_delete_a_dataset(world: dict) -> None:
    client, headers = world["client"], world["headers"]
    ada, manifest = headers["ada"], world["vision"]["manifest"].removeprefix("sha256:")
    into_vision = {"manifest": manifest, "team": "vision"}

    refused(
        client.put(
            f"{API}/dataset-blobs/{sha(b'x')}", content=b"x", params={"team": "vision"}, headers=ada
        ),
        404,
        "not_found",
    )
    for route in ("uploads", "versions"):
        answer = client.post(f"{API}/datasets/labels/{route}", json=into_vision, headers=ada)
        refused(answer, 404, "not_found")
    refused(client.delete(f"{API}/datasets/labels/versions/1", headers=ada), 404, "not_found")
    refused(client.delete(f"{API}/datasets/labels", headers=ada), 404, "not_found")
    viewer = client.delete(f"{API}/datasets/labels", headers=headers["val"])
    refused(viewer, 403, "forbidden")
    assert client.get(f"{API}/datasets/labels", headers=headers["vic"]).json()["version_count"] == 1


def test_a_blob_another_team_holds_must_be_uploaded_to_be_used(world: dict) -> None:
    """Knowing a hash is not having the bytes: audio's plan names vision's blob as missing
    (so audio does not learn vision has it), and a commit without it is refused."""
    client, ada = world["client"], world["headers"]["ada"]
    manifest = manifest_of({"stolen.txt": SECRET})
    client.put(f"{API}/dataset-blobs/{sha(manifest)}", content=manifest, headers=ada)

    plan = client.post(
        f"{API}/datasets/stolen/uploads", json={"manifest": sha(manifest)}, headers=ada
    )
    commit = client.post(
        f"{API}/datasets/stolen/versions", json={"manifest": sha(manifest)}, headers=ada
    )

    assert plan.json()["missing"] == [sha(SECRET)]
    assert refused(commit, 409, "blobs_missing")["details"]["missing"] == [sha(SECRET)]
    # nor can audio commit vision's own manifest, which it never uploaded
    theirs = {"manifest": world["vision"]["manifest"].removeprefix("sha256:")}
    answer = client.post(f"{API}/datasets/stolen/versions", json=theirs, headers=ada)
    refused(answer, 409, "blobs_missing")


def test_another_teams_dataset_or_volume_cannot_be_mounted(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    forged = {
        "name": "audio-set",
        "manifest": world["vision"]["manifest"].removeprefix("sha256:"),
    }

    for datasets in (["labels"], ["labels:1"], [{"name": "labels", "version": 1}]):
        body = {"command": ["true"], "datasets": datasets}
        refused(client.post(f"{API}/jobs", json=body, headers=ada), 404, "not_found")
    body = {"command": ["true"], "volumes": ["vision-scratch:/v"]}
    refused(client.post(f"{API}/jobs", json=body, headers=ada), 404, "not_found")
    job = client.post(f"{API}/jobs", json={"command": ["true"], "datasets": [forged]}, headers=ada)
    assert job.status_code == 201, job.text
    recorded = job.json()["spec"]["datasets"][0]["manifest"]
    assert recorded == world["own"]["manifest"].removeprefix("sha256:")  # its own, not forged


def test_another_team_cannot_see_or_delete_a_volume(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]

    assert client.get(f"{API}/volumes", headers=ada).json() == []
    refused(client.get(f"{API}/volumes/vision-scratch", headers=ada), 404, "not_found")
    refused(client.delete(f"{API}/volumes/vision-scratch", headers=ada), 404, "not_found")
    into = {"name": "x", "team": "vision"}
    refused(client.post(f"{API}/volumes", json=into, headers=ada), 404, "not_found")
    vision = client.get(f"{API}/volumes", headers=world["headers"]["vic"]).json()
    assert [v["name"] for v in vision] == ["vision-scratch"]


def test_a_job_cannot_write_into_the_dataset_it_reads(world: dict) -> None:
    client, vic = world["client"], world["headers"]["vic"]
    script = (
        "d=/datasets/labels; for try in 'echo x > $d/new' 'echo x >> $d/labels.txt'"
        " 'rm $d/labels.txt' 'chmod 666 $d/labels.txt' 'mv $d/labels.txt $d/moved'"
        ' \'mount -o remount,rw $d\'; do sh -c "$try" 2>/dev/null && echo "DID: $try"; done;'
        " cat $d/labels.txt"
    )
    job = client.post(
        f"{API}/jobs", json={"command": ["sh", "-c", script], "datasets": ["labels"]}, headers=vic
    )
    assert job.status_code == 201, job.text
    assert wait_job(client, job.json()["id"])["status"] == "succeeded"
    text = client.get(f"{API}/jobs/{job.json()['id']}/logs", headers=vic).json()["text"]

    assert "DID:" not in text, text
    assert text.endswith(SECRET.decode())
    kept = world["platform"].settings.datasets_dir / "blobs" / sha(SECRET)[:2] / sha(SECRET)
    assert kept.read_bytes() == SECRET


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "a/../../b", "ok/../.."])
def test_a_manifest_that_climbs_out_of_its_version_is_refused(world: dict, path: str) -> None:
    client, vic = world["client"], world["headers"]["vic"]
    entry = {"path": path, "size": len(SECRET), "mode": 0o644, "sha256": sha(SECRET)}
    manifest = json.dumps({"version": 1, "files": [entry]}).encode()
    client.put(f"{API}/dataset-blobs/{sha(manifest)}", content=manifest, headers=vic)

    for route in ("uploads", "versions"):
        answer = client.post(
            f"{API}/datasets/climb/{route}", json={"manifest": sha(manifest)}, headers=vic
        )
        refused(answer, 422, "bad_manifest")


def test_a_full_volume_of_another_team_is_answered_as_none_at_all(world: dict) -> None:
    """Whether another team's volume is over its size, and what it takes, is not to be
    learnt: its refusal is 404, as for a volume that does not exist, and no listing shows
    its usage."""
    client, platform = world["client"], world["platform"]
    vic, ada = world["headers"]["vic"], world["headers"]["ada"]
    made = client.post(
        f"{API}/volumes", json={"name": "vision-tight", "size_bytes": 10}, headers=vic
    )
    assert made.status_code == 201, made.text
    with platform.db.session() as session:  # as the storage scan records it
        session.execute(
            update(VolumeModel).where(VolumeModel.name == "vision-tight").values(used_bytes=99)
        )
    body = {"command": ["true"], "volumes": ["vision-tight:/v"]}

    theirs = client.post(f"{API}/jobs", json=body, headers=ada)
    own = client.post(f"{API}/jobs", json=body, headers=vic)

    assert "99" not in refused(theirs, 404, "not_found")["message"]
    assert refused(own, 409, "volume_full")["details"]["used"] == 99
    assert client.get(f"{API}/volumes", headers=ada).json() == []
    for params in ({}, {"team": "vision"}):
        shown = client.get(f"{API}/volumes/vision-tight", params=params, headers=ada)
        refused(shown, 404, "not_found")
        assert "used" not in shown.json()


def test_another_teams_deleted_copy_cannot_take_a_blob_a_version_uses(world: dict) -> None:
    """Audio uploads bytes vision's version uses too (a file both have), then deletes its
    dataset: the store's sweep forgets audio's holding of them, and keeps the blob for
    vision's version, which jobs still read."""
    client, platform = world["client"], world["platform"]
    vic, ada = world["headers"]["vic"], world["headers"]["ada"]
    public = b"a public word list both teams have\n"
    upload(client, vic, "words", {"words.txt": public})
    upload(client, ada, "copy", {"words.txt": public})
    assert client.delete(f"{API}/datasets/copy", headers=ada).status_code == 204
    settings = platform.settings.model_copy(update={"dataset_blob_grace_seconds": 0})
    sweeper = SimpleNamespace(db=platform.db, clock=platform.clock, settings=settings)

    for _ in range(2):  # the holdings first, then the files
        collect_blobs(sweeper)

    assert (platform.settings.datasets_dir / blob_relpath(sha(public))).read_bytes() == public
    job = client.post(
        f"{API}/jobs",
        json={"command": ["cat", "/datasets/words/words.txt"], "datasets": ["words"]},
        headers=vic,
    )
    assert job.status_code == 201, job.text
    assert wait_job(client, job.json()["id"])["status"] == "succeeded"
    logs = client.get(f"{API}/jobs/{job.json()['id']}/logs", headers=vic).json()["text"]
    assert logs == public.decode()
