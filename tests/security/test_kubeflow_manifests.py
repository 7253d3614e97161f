"""Hostile Kubeflow manifests: a member of another team applies a manifest whose queue label
names a team they are not in, mounts that team's volume as a claim, or runs in its image; a
viewer applies one. Each is refused as the same Job submitted to the API would be (the same
code, the same words, whether the team's thing exists or not), as a dry run too, and nothing
of the file is made."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpupool.store.models import ImageModel
from tests.support.kubeflow import container, pod, pytorch_job, replica
from tests.support.platform import make_settings, refused, running_app

APPLY = "/api/v1/apply"
QUEUE = "kueue.x-k8s.io/queue-name"
USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Teams vision (a member, a viewer) and audio (a member); vision has the volume 'vvol'
    and the image 'vision/secret:1'."""
    data = tmp_path_factory.mktemp("hostile-kubeflow") / "data"
    with running_app(make_settings(data)) as (admin, platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        made = admin.post("/api/v1/volumes", json={"name": "vvol"}, headers=headers["vic"])
        assert made.status_code == 201, made.text
        vision = next(t for t in admin.get("/api/v1/teams").json() if t["name"] == "vision")
        with platform.db.session() as session:
            session.add(_image(vision["id"], "vision/secret:1"))
        yield {"client": admin, "headers": headers}


def _image(team_id: int, name: str) -> ImageModel:
    return ImageModel(
        team_id=team_id,
        name=name,
        digest="sha256:" + "cd" * 32,
        source="pull",
        size_bytes=1,
        config={"Cmd": ["python", "secret.py"]},
        created_at=0.0,
        created_by=1,
    )


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _manifest(main: dict[str, Any] | None = None, **pod_spec: Any) -> dict[str, Any]:
    main = main if main is not None else container(command=["true"])
    return pytorch_job({"Master": replica(1, pod(main, **pod_spec))}, name="probe")


def _jobs(client: TestClient) -> int:
    every = ["pending", "starting", "running", "succeeded", "failed", "cancelled", "lost"]
    return len(client.get("/api/v1/jobs", params={"status": every}).json())


def _unlabelled(message: str) -> str:
    return message.split("): ", 1)[1]


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_queue_label_of_another_team_is_refused_as_a_submit_to_it(
    world: dict, dry_run: bool
) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    before = _jobs(client)
    manifest = _manifest()
    manifest["metadata"]["labels"] = {QUEUE: "vision"}
    mine = {"apiVersion": "gpupool/v1", "kind": "Job", "spec": {"command": ["true"]}}
    body = {"documents": [mine, manifest], "dry_run": dry_run, "ignore_image": True}
    error = refused(client.post(APPLY, json=body, headers=ada), 422, "unknown_team")
    assert error["message"].startswith("document 2 (PyTorchJob probe): ")
    submit = {"command": ["true"], "team": "vision"}
    direct = refused(client.post("/api/v1/jobs", json=submit, headers=ada), 422, "unknown_team")
    assert _unlabelled(error["message"]) == direct["message"]
    assert _jobs(client) == before  # the file's other job was not made either
    with_image = _manifest(container(command=["true"], image="vision/secret:1"))
    with_image["metadata"]["labels"] = {QUEUE: "vision"}
    body = {"documents": [with_image], "dry_run": dry_run}
    again = refused(client.post(APPLY, json=body, headers=ada), 422, "unknown_team")
    assert again["message"] == error["message"].replace("document 2", "document 1")


def test_another_teams_volume_is_no_claim_of_yours(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    answers = []
    for claim in ("vvol", "nothing-here"):
        volumes = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
        mounts = [{"name": "v", "mountPath": "/data"}]
        manifest = _manifest(container(command=["true"], volumeMounts=mounts), volumes=volumes)
        body = {"documents": [manifest], "dry_run": True, "ignore_image": True}
        error = refused(client.post(APPLY, json=body, headers=ada), 422, "claim_not_found")
        answers.append(error["message"].replace(claim, "X"))
    assert answers[0] == answers[1]


def test_another_teams_image_is_as_one_that_does_not_exist(world: dict) -> None:
    client, ada, vic = world["client"], world["headers"]["ada"], world["headers"]["vic"]
    answers = []
    for reference in ("vision/secret:1", "vision/nothing:1"):
        body = {"documents": [_manifest(container(image=reference))], "dry_run": True}
        error = refused(client.post(APPLY, json=body, headers=ada), 422, "image_not_available")
        answers.append(error["message"].replace(reference, "X"))
    assert answers[0] == answers[1]
    body = {"documents": [_manifest(container(image="vision/secret:1"))], "dry_run": True}
    answer = client.post(APPLY, json=body, headers=vic)  # its own team's: its Cmd is known
    assert answer.status_code == 200, answer.text
    spec = answer.json()["documents"][0]["document"]["spec"]
    assert spec["image"] == "vision/secret:1" and spec["command"] == ["python", "secret.py"]


def test_a_viewer_cannot_apply_a_manifest(world: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    for dry_run in (False, True):
        body = {"documents": [_manifest()], "dry_run": dry_run, "ignore_image": True}
        refused(client.post(APPLY, json=body, headers=val), 403, "forbidden")
