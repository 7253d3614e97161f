"""Hostile use of container images: a member of another team lists, reads, removes and
re-pulls a team's image by its name or its digest, or names it in a job; a viewer pulls or
removes; a member removes the site's image. Everything is refused (404 for what another
team cannot see), and the team's image stays. Hostile images themselves (links out of the
root, setuid files, device nodes, '..' paths, hard links out) are neutralised or refused:
tests/integration/api/test_images_api.py."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.images import BUSYBOX, ImageConfig, Member, Registry, base_members, layer
from tests.support.platform import make_settings, refused, running_app, wait_job

IMAGES = "/api/v1/images"
USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, image_registry: Registry) -> Iterator[dict]:
    """Teams vision and audio; vision's member pulled vision's image, the admin a site one."""
    data = tmp_path_factory.mktemp("hostile-images") / "data"
    settings = make_settings(data, image_registries=f"{image_registry.host}=insecure")
    with running_app(settings) as (admin, platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        config = ImageConfig(env=["PATH=/bin", "SECRET=vision-only"])
        ref = image_registry.push("vision/secret", [layer(base_members())], config)
        pulled = admin.post(f"{IMAGES}/pull", json={"ref": ref}, headers=headers["vic"])
        assert pulled.status_code == 201, pulled.text
        assert pulled.json()["team"] == "vision"
        site_ref = image_registry.push("site/base", [layer(base_members("site\n"))])
        site = admin.post(f"{IMAGES}/pull", json={"ref": site_ref})
        assert site.status_code == 201 and site.json()["team"] is None
        yield {
            "client": admin,
            "platform": platform,
            "headers": headers,
            "ref": ref,
            "digest": pulled.json()["digest"],
            "site": site_ref,
        }


def test_another_teams_member_cannot_list_show_or_remove_it(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    listed = client.get(IMAGES, headers=ada).json()
    assert [i["name"] for i in listed] == [world["site"]]  # the site's only
    assert client.get(IMAGES, params={"team": "vision"}, headers=ada).json() == []
    for name in (world["ref"], world["digest"]):
        refused(client.get(f"{IMAGES}/{name}", headers=ada), 404, "not_found")
        refused(client.delete(f"{IMAGES}/{name}", headers=ada), 404, "not_found")
        refused(
            client.get(f"{IMAGES}/{name}", params={"team": "vision"}, headers=ada),
            404,
            "not_found",
        )
    vic = world["headers"]["vic"]
    assert client.get(f"{IMAGES}/{world['ref']}", headers=vic).status_code == 200


def test_another_teams_member_cannot_pull_into_the_team(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    body = {"ref": world["ref"], "team": "vision"}
    # as a submit to another team is answered
    refused(client.post(f"{IMAGES}/pull", json=body, headers=ada), 422, "unknown_team")
    # pulling the same image into its own team gives it its own name for it, nothing more
    own = client.post(f"{IMAGES}/pull", json={"ref": world["ref"]}, headers=ada)
    assert own.status_code == 201 and own.json()["team"] == "audio"
    vic = world["headers"]["vic"]
    assert client.get(f"{IMAGES}/{world['ref']}", headers=vic).json()["team"] == "vision"
    assert client.delete(f"{IMAGES}/{world['ref']}", headers=ada).status_code == 200
    assert client.get(f"{IMAGES}/{world['ref']}", headers=vic).status_code == 200


def test_a_viewer_reads_but_neither_pulls_nor_removes(world: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    assert client.get(f"{IMAGES}/{world['ref']}", headers=val).status_code == 200
    refused(
        client.post(f"{IMAGES}/pull", json={"ref": world["ref"]}, headers=val), 403, "forbidden"
    )
    refused(client.delete(f"{IMAGES}/{world['ref']}", headers=val), 403, "forbidden")


def test_a_member_cannot_remove_the_sites_image(world: dict) -> None:
    client, vic = world["client"], world["headers"]["vic"]
    assert client.get(f"{IMAGES}/{world['site']}", headers=vic).status_code == 200
    refused(client.delete(f"{IMAGES}/{world['site']}", headers=vic), 403, "forbidden")
    assert client.get(f"{IMAGES}/{world['site']}").status_code == 200


def test_another_teams_member_cannot_run_a_job_in_it(world: dict) -> None:
    client, ada, vic = world["client"], world["headers"]["ada"], world["headers"]["vic"]
    for name in (world["ref"], world["digest"]):
        body = {"command": ["env"], "image": name}
        refused(client.post("/api/v1/jobs", json=body, headers=ada), 404, "image_not_found")
    # nor by setting the digest the server records itself
    forged = {"command": ["env"], "image": world["site"], "image_digest": world["digest"]}
    job = client.post("/api/v1/jobs", json=forged, headers=ada)
    assert job.status_code == 201, job.text
    assert job.json()["spec"]["image_digest"] != world["digest"]  # the site's, resolved
    client.post(f"/api/v1/jobs/{job.json()['id']}/cancel", headers=ada)
    # vision's member may, and its job records vision's image
    body = {"command": ["true"], "image": world["digest"]}
    mine = client.post("/api/v1/jobs", json=body, headers=vic)
    assert mine.status_code == 201 and mine.json()["spec"]["image_digest"] == world["digest"]
    client.post(f"/api/v1/jobs/{mine.json()['id']}/cancel", headers=vic)


def test_a_job_in_a_hostile_image_reaches_nothing_of_the_host(
    world: dict, image_registry: Registry
) -> None:
    """Links out of the root resolve in the image's own root; a setuid file runs as the job's
    account; the host's files and the server's data stay out of sight."""
    client, vic = world["client"], world["headers"]["vic"]
    hostile = layer(
        [
            Member("etc/host-passwd", "symlink", target="/etc/passwd"),
            Member("up", "symlink", target="../../../../../.."),
            Member("bin/suid-id", "hardlink", target="bin/busybox"),
            Member("escape", "symlink", target=str(world["platform"].settings.data_dir)),
        ]
    )
    setuid = layer(
        [
            Member("usr/bin", "dir", mode=0o755),
            Member("usr/bin/id", data=BUSYBOX.read_bytes(), mode=0o4755),  # busybox's id
        ]
    )
    ref = image_registry.push("vision/hostile", [layer(base_members()), hostile, setuid])
    pulled = client.post(f"{IMAGES}/pull", json={"ref": ref}, headers=vic)
    assert pulled.status_code == 201, pulled.text
    script = (
        "cat /etc/host-passwd; echo passwd=$?; ls /up/ | tr '\\n' ' '; echo;"
        " echo escape: $(ls /escape/); echo uid=$(/usr/bin/id -u) mode=$(stat -c %a /usr/bin/id);"
        " ls /usr/lib/python3* 2>&1"
    )
    body = {"command": ["sh", "-c", script], "image": ref}
    job = client.post("/api/v1/jobs", json=body, headers=vic)
    assert job.status_code == 201, job.text
    done = wait_job(client, job.json()["id"])
    text = client.get(f"/api/v1/jobs/{done['id']}/logs").json()["text"]
    assert "root:" not in text and "passwd=1" in text  # the image has no /etc/passwd
    assert "bin dev escape etc" in text  # '..' links end in the image's own root
    # the data directory's path shows only the way to the job's own directories
    assert "escape: jobs\n" in text
    assert re.search(r"uid=[1-9][0-9]* mode=755", text), text  # setuid dropped: the job's uid
    assert "No such file" in text  # no host Python


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}
