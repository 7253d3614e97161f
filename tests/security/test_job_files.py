"""Hostile job files: a member of another team applies documents that wait on a team's job,
submit into that team, or hide one such document among good ones; that make a dataset from
the team's job, into the team, or from its manifest's hash, or read its dataset or mount
its volume; a viewer applies, even as a dry run. Each is refused as the same request to the
API's own routes is, as if what it names did not exist, and nothing of the file is made (one
transaction); a dry run reveals no more than a submit does."""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.domain.datasets import ManifestFile, manifest_bytes
from tests.support.platform import make_settings, refused, running_app, wait_job

APPLY = "/api/v1/apply"
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
V1 = "gpupool/v1"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Teams vision (a member, a viewer) and audio (a member); vision has a job 'secret'."""
    data = tmp_path_factory.mktemp("hostile-job-files") / "data"
    with running_app(make_settings(data)) as (admin, _platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        answer = admin.post(
            "/api/v1/jobs", json={"command": SLEEP, "name": "secret"}, headers=headers["vic"]
        )
        assert answer.status_code == 201, answer.text
        yield {"client": admin, "headers": headers, "secret": answer.json()["id"]}
        admin.post(f"/api/v1/jobs/{answer.json()['id']}/cancel")


USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


def _job(name: str, **spec: object) -> dict:
    return {"apiVersion": V1, "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _jobs(client: TestClient) -> int:
    every = ["pending", "starting", "running", "succeeded", "failed", "cancelled", "lost"]
    return len(client.get("/api/v1/jobs", params={"status": every}).json())


@pytest.mark.parametrize("dry_run", [False, True])
def test_another_teams_job_cannot_be_waited_on_or_probed(world: dict, dry_run: bool) -> None:
    client, ada, secret = world["client"], world["headers"]["ada"], world["secret"]
    before = _jobs(client)
    answers = []
    for target in (secret, "secret", 10**9, "nothing"):
        documents = [
            _job("mine", command=["true"]),
            _job("probe", command=["true"], depends_on=[target]),
        ]
        body = {"documents": documents, "dry_run": dry_run}
        error = refused(client.post(APPLY, json=body, headers=ada), 422, "unknown_dependency")
        answers.append(_as_x(error["message"], target))
    assert answers[0] == answers[2] and answers[1] == answers[3]
    assert _jobs(client) == before  # 'mine' was not made either


def test_a_file_cannot_submit_into_another_team(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    before = _jobs(client)
    documents = [
        _job("mine", command=["true"]),
        _job("theirs", command=["true"], team="vision"),
        {"apiVersion": V1, "kind": "Notebook", "spec": {"team": "vision"}},
    ]
    error = refused(
        client.post(APPLY, json={"documents": documents}, headers=ada), 422, "unknown_team"
    )
    assert error["message"].startswith("document 2 (Job theirs): ")
    assert _jobs(client) == before


def test_a_viewer_may_read_the_schemas_but_not_apply(world: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    documents = [_job("view", command=["true"])]
    for dry_run in (False, True):
        body = {"documents": documents, "dry_run": dry_run}
        refused(client.post(APPLY, json=body, headers=val), 403, "forbidden")
    assert client.get("/api/v1/schemas/Job", headers=val).status_code == 200
    anonymous = {"Authorization": ""}
    refused(client.get("/api/v1/schemas/", headers=anonymous), 401, "unauthenticated")
    made = client.post(APPLY, json={"documents": documents}, headers=world["headers"]["vic"])
    assert made.status_code == 200, made.text
    assert wait_job(client, made.json()["documents"][0]["id"])["status"] == "succeeded"


def _doc(kind: str, name: str, **spec: object) -> dict:
    return {"apiVersion": V1, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _upload(client: TestClient, headers: dict[str, str], data: bytes) -> str:
    """``data`` as a one-file version's blobs, uploaded by ``headers``'s team; the
    manifest's hex."""
    blob = hashlib.sha256(data).hexdigest()
    manifest = manifest_bytes([ManifestFile("f.txt", len(data), 0o644, blob)])
    for each in (data, manifest):
        url = f"/api/v1/dataset-blobs/{hashlib.sha256(each).hexdigest()}"
        assert client.put(url, content=each, headers=headers).status_code == 200
    return hashlib.sha256(manifest).hexdigest()


@pytest.fixture(scope="module")
def vision_data(world: dict) -> dict:
    """Vision's dataset 'vdata' (from vic's upload), its volume 'vvol' and an ended job
    'vdone' whose outputs a version could be made from."""
    client, vic = world["client"], world["headers"]["vic"]
    manifest = _upload(client, vic, b"vision's rows\n")
    script = 'echo private > "$GPUPOOL_OUTPUT_DIR/p.txt"'
    documents = [
        _doc("Dataset", "vdata", manifest=manifest),
        _doc("Volume", "vvol"),
        _job("vdone", command=["sh", "-c", script]),
    ]
    made = client.post(APPLY, json={"documents": documents}, headers=vic)
    assert made.status_code == 200, made.text
    done = made.json()["documents"][2]["id"]
    assert wait_job(client, done)["status"] == "succeeded"
    return {"manifest": manifest, "job": done}


def _message(client: TestClient, who: dict[str, str], documents: list, code: str) -> str:
    error = refused(client.post(APPLY, json={"documents": documents}, headers=who), 404, code)
    return error["message"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_dataset_cannot_be_made_from_another_teams_job(
    world: dict, vision_data: dict, dry_run: bool
) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    answers = []
    for target in (vision_data["job"], 10**9, world["secret"], "vdone", "nothing"):
        documents = [_doc("Volume", "mine"), _doc("Dataset", "stolen", fromJob=target)]
        body = {"documents": documents, "dry_run": dry_run}
        error = refused(client.post(APPLY, json=body, headers=ada), 404, "not_found")
        answers.append(_as_x(error["message"], target))
    assert answers[0] == answers[1] == answers[2]  # ended, absent, running: all the same
    assert answers[3] == answers[4]
    assert "stolen" not in [d["name"] for d in client.get("/api/v1/datasets", headers=ada).json()]
    assert "mine" not in [v["name"] for v in client.get("/api/v1/volumes", headers=ada).json()]


def test_another_teams_dataset_volume_and_blobs_are_as_if_absent(
    world: dict, vision_data: dict
) -> None:
    client, ada, vic = world["client"], world["headers"]["ada"], world["headers"]["vic"]
    into = [_doc("Dataset", "x", manifest=vision_data["manifest"], team=team)
            for team in ("vision", "nosuch")]  # fmt: skip
    first, second = (_message(client, ada, [d], "not_found") for d in into)
    assert first.replace("vision", "T") == second.replace("nosuch", "T")
    for team in ("vision", "nosuch"):
        _message(client, ada, [_doc("Volume", "v", team=team)], "not_found")

    reads = [_job("r", command=["true"], datasets=[name]) for name in ("vdata", "nodata")]
    first, second = (_message(client, ada, [d], "not_found") for d in reads)
    assert first.replace("vdata", "N") == second.replace("nodata", "N")
    mounts = [_job("m", command=["true"], volumes=[f"{n}:/v"]) for n in ("vvol", "novol")]
    first, second = (_message(client, ada, [d], "not_found") for d in mounts)
    assert first.replace("vvol", "N") == second.replace("novol", "N")

    # vision's manifest, named by its hash: ada's team never uploaded it
    guessed = [_doc("Dataset", "vdata", manifest=vision_data["manifest"])]
    error = refused(
        client.post(APPLY, json={"documents": guessed}, headers=ada), 409, "blobs_missing"
    )  # noqa: E501
    absent = [_doc("Dataset", "vdata", manifest="ab" * 32)]
    other = refused(
        client.post(APPLY, json={"documents": absent}, headers=ada), 409, "blobs_missing"
    )  # noqa: E501
    assert error["message"].replace(vision_data["manifest"], "H") == other["message"].replace(
        "ab" * 32, "H"
    )
    # ada's own 'vdata' and 'vvol' are hers: vision's stay as they were
    own = [
        _doc("Dataset", "vdata", manifest=_upload(client, ada, b"audio\n")),
        _doc("Volume", "vvol"),
    ]  # noqa: E501
    made = client.post(APPLY, json={"documents": own}, headers=ada)
    assert made.status_code == 200, made.text
    theirs = client.get("/api/v1/datasets/vdata", headers=vic).json()
    assert theirs["team"] == "vision" and [v["version"] for v in theirs["versions"]] == [1]
    assert client.get("/api/v1/datasets/vdata", headers=ada).json()["team"] == "audio"


def test_a_viewer_cannot_make_a_dataset_or_a_volume(world: dict, vision_data: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    documents = [_doc("Dataset", "v2", manifest=vision_data["manifest"]), _doc("Volume", "v3")]
    for dry_run in (False, True):
        body = {"documents": documents, "dry_run": dry_run}
        refused(client.post(APPLY, json=body, headers=val), 403, "forbidden")


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _as_x(message: str, target: object) -> str:
    """The message with the target named as X, not the document's number (a job's id may
    be 2 as well)."""
    return re.sub(rf"(?<!document )\b{re.escape(str(target))}\b", "X", message)
