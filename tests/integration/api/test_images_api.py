"""Container images through the API, in process, against a real registry on 127.0.0.1:
pulled with skopeo from a registry the site allows, imported from OCI and docker archives,
kept once per manifest digest and unpacked rootless with umoci, listed and removed; bad
names, registries not allowed, broken archives and removals while a job uses the image are
refused with a clear 4xx."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from gpupool.store.models import JobModel, TeamModel, UserModel
from tests.support.images import (
    OS_RELEASE,
    ImageConfig,
    Layout,
    Member,
    Registry,
    base_members,
    layer,
)
from tests.support.platform import make_settings, refused, running_app

IMAGES = "/api/v1/images"
CONFIG = ImageConfig(
    env=["PATH=/bin", "GREETING=hello from the image"], entrypoint=["/bin/sh"], workdir="/srv"
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    image_registry: Registry,
) -> Iterator[tuple[TestClient, Platform]]:
    data = tmp_path_factory.mktemp("images") / "data"
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").migrated_database()
    settings = make_settings(
        data,
        url,
        image_registries=f"{image_registry.host}=insecure",
        max_image_bytes=16 * 1024**2,
    )
    with running_app(settings) as running:
        yield running


@pytest.fixture(scope="module")
def base(image_registry: Registry) -> str:
    return image_registry.push("api/base", [layer(base_members())], CONFIG)


def pull(client: TestClient, ref: str, **fields: object):  # noqa: ANN201
    return client.post(f"{IMAGES}/pull", json={"ref": ref, **fields})


def test_a_pulled_image_is_kept_once_by_digest_and_unpacked(
    app: tuple[TestClient, Platform], base: str, image_registry: Registry
) -> None:
    client, platform = app
    first = pull(client, base)
    assert first.status_code == 201, first.text
    image = first.json()
    assert image["name"] == base and image["team"] is None  # the admin's: the site's
    assert image["digest"].startswith("sha256:") and image["source"] == "pull"
    assert "GREETING=hello from the image" in image["env"]
    assert image["entrypoint"] == ["/bin/sh"] and image["workdir"] == "/srv"
    assert image["size_bytes"] > 1_000_000  # busybox

    # the same image again, and under another tag: still one copy in the store
    assert pull(client, base).json()["digest"] == image["digest"]
    other_tag = image_registry.push("api/base", [layer(base_members())], CONFIG, tag="2")
    assert pull(client, other_tag).json()["digest"] == image["digest"]
    store = platform.settings.images_dir
    assert [p.name for p in (store / "oci").iterdir()] == [image["digest"].removeprefix("sha256:")]
    root = store / "roots" / image["digest"].removeprefix("sha256:") / "rootfs"
    assert (root / "etc" / "os-release").read_text() == OS_RELEASE
    assert [p for p in (store / "incoming").iterdir()] == []

    listed = client.get(IMAGES).json()
    assert [i["name"] for i in listed].count(base) == 1
    assert client.get(f"{IMAGES}/{base}").json()["digest"] == image["digest"]
    assert client.get(f"{IMAGES}/{image['digest']}").json()["digest"] == image["digest"]


def test_pulls_only_from_allowed_registries_and_valid_names(
    app: tuple[TestClient, Platform], image_registry: Registry
) -> None:
    client, _ = app
    error = refused(pull(client, "docker.io/library/ubuntu:22.04"), 403, "registry_not_allowed")
    assert (
        image_registry.host in error["message"] and "GPUPOOL_IMAGE_REGISTRIES" in error["message"]
    )
    refused(pull(client, "ubuntu"), 403, "registry_not_allowed")  # docker.io by default
    refused(pull(client, "Not An Image!"), 422, "invalid_image_name")
    refused(pull(client, "--option"), 422, "invalid_image_name")
    missing = refused(pull(client, f"{image_registry.host}/api/none:1"), 422, "image_pull_failed")
    assert "manifest unknown" in missing["message"] or "not found" in missing["message"]


def test_archives_are_imported_in_oci_and_docker_formats(
    app: tuple[TestClient, Platform], tmp_path: Path
) -> None:
    client, _ = app
    layout = Layout(tmp_path / "layout")
    layout.add("tool:3", [layer(base_members("imported\n"))], ImageConfig(env=["A=1"]))
    oci = layout.oci_archive("tool:3", tmp_path / "oci.tar")
    docker = layout.docker_archive("tool:3", tmp_path / "docker.tar", "example.org/team/tool:4")

    answer = client.post(f"{IMAGES}/import", content=oci.read_bytes())
    assert answer.status_code == 201, answer.text
    assert answer.json()["name"] == "tool:3" and answer.json()["source"] == "import"
    named = client.post(
        f"{IMAGES}/import", params={"name": "mine/tool"}, content=docker.read_bytes()
    )
    assert named.status_code == 201, named.text
    assert named.json()["name"] == "mine/tool:latest"
    carried = client.post(f"{IMAGES}/import", content=docker.read_bytes()).json()
    assert carried["name"] == "team/tool:4"
    assert carried["env"] == ["A=1"]


def test_broken_and_oversized_archives_are_refused(
    app: tuple[TestClient, Platform], tmp_path: Path
) -> None:
    client, platform = app
    refused(client.post(f"{IMAGES}/import", content=b"not a tar at all"), 422, "bad_image_archive")
    refused(
        client.post(f"{IMAGES}/import", params={"name": "UPPER"}, content=b"x"),
        422,
        "invalid_image_name",
    )
    big = b"\0" * (16 * 1024**2 + 1)
    refused(client.post(f"{IMAGES}/import", content=big), 413, "image_too_large")
    assert list((platform.settings.images_dir / "incoming").glob("*.part")) == []


def test_rm_is_refused_while_a_job_that_has_not_ended_uses_the_image(
    app: tuple[TestClient, Platform], base: str
) -> None:
    client, platform = app
    digest = pull(client, base).json()["digest"]
    job_id = _job_in(platform, digest, "running")
    error = refused(client.delete(f"{IMAGES}/{base}"), 409, "image_in_use")
    assert str(job_id) in error["message"]
    with platform.db.session() as session:
        session.get(JobModel, job_id).status = "succeeded"  # type: ignore[union-attr]
    removed = client.delete(f"{IMAGES}/{base}")
    assert removed.status_code == 200, removed.text
    refused(client.get(f"{IMAGES}/{base}"), 404, "not_found")
    assert pull(client, base).json()["digest"] == digest  # and it can be pulled again


def test_a_hostile_image_is_neutralised_when_unpacked(
    app: tuple[TestClient, Platform], image_registry: Registry
) -> None:
    client, platform = app
    hostile = layer(
        [
            Member("../escape", data=b"up"),
            Member("/absolute", data=b"abs"),
            Member("bin/suid", data=b"#!/bin/sh\n", mode=0o4755),
            Member("bin/sgid", data=b"#!/bin/sh\n", mode=0o2755),
            Member("dev", "dir", mode=0o755),
            Member("dev/mem", "char", mode=0o666),
            Member("dev/sda", "block", mode=0o666),
            Member("pipe", "fifo"),
            Member("etc/host-shadow", "symlink", target="/etc/shadow"),
            Member("up", "symlink", target="../../../../.."),
        ]
    )
    ref = image_registry.push("api/hostile", [layer(base_members()), hostile])
    answer = pull(client, ref)
    assert answer.status_code == 201, answer.text
    digest = answer.json()["digest"].removeprefix("sha256:")
    bundle = platform.settings.images_dir / "roots" / digest
    root = bundle / "rootfs"
    # '..' and absolute members land inside the root, never beside it
    assert (root / "escape").read_bytes() == b"up" and not (bundle / "escape").exists()
    assert (root / "absolute").read_bytes() == b"abs"
    for name in ("bin/suid", "bin/sgid"):
        assert not (root / name).stat().st_mode & (stat.S_ISUID | stat.S_ISGID), name
    for name in ("dev/mem", "dev/sda", "pipe"):
        path = root / name
        assert not path.exists() or stat.S_ISREG(path.lstat().st_mode), name
        assert not path.exists() or path.stat().st_size == 0
    assert (root / "etc" / "host-shadow").is_symlink()  # a link stays a link: inside the
    assert (root / "up").is_symlink()  # sandbox it resolves in the image's root


def test_a_hard_link_out_of_the_image_is_refused(
    app: tuple[TestClient, Platform], image_registry: Registry
) -> None:
    client, platform = app
    linked = layer([Member("passwd", "hardlink", target="/etc/passwd")])
    ref = image_registry.push("api/hardlink", [layer(base_members()), linked])
    error = refused(pull(client, ref), 422, "image_pull_failed")
    assert "cannot be used" in error["message"]
    refused(client.get(f"{IMAGES}/{ref}"), 404, "not_found")
    kept = [p.name for p in (platform.settings.images_dir / "oci").iterdir()]
    assert all(client.get(f"{IMAGES}/sha256:{hexdigest}").status_code == 200 for hexdigest in kept)


def test_a_server_without_skopeo_says_what_to_install(
    app: tuple[TestClient, Platform], base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = app
    monkeypatch.setenv("PATH", "/nonexistent")
    error = refused(pull(client, base), 503, "images_unavailable")
    assert "skopeo and umoci not installed" in error["message"]
    assert "install-system-deps.sh" in error["message"]


def _job_in(platform: Platform, digest: str, status: str) -> int:
    """A job of the default team recorded as running in the image ``digest``."""
    now = platform.clock.now()
    with platform.db.session() as session:
        admin = session.query(UserModel).filter_by(name="admin").one()
        team = session.query(TeamModel).filter_by(name="default").one()
        job = JobModel(
            user_id=admin.id,
            team_id=team.id,
            spec={"command": ["true"], "image": digest, "image_digest": digest},
            status=status,
            submitted_at=now,
        )
        session.add(job)
        session.flush()
        return job.id
