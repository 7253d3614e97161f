"""Datasets through the API, in process, on a real SQLite file and PostgreSQL: a manifest
uploaded as a blob, the blobs the team lacks named, only those uploaded (hash checked), the
version committed and numbered 1, 2, 3 ...; a version made server side from a job's
outputs; hostile manifests, limits, missing blobs and deletes of versions in use refused
with a clear 4xx."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from gpupool.domain.datasets import ManifestFile, manifest_bytes
from gpupool.services.platform import Platform
from gpupool.store.models import DatasetUseModel
from tests.support.platform import make_settings, refused, running_app, submit, wait_job

API = "/api/v1"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, Platform]]:
    data = tmp_path_factory.mktemp("datasets") / "data"
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").migrated_database()
    settings = make_settings(data, url, max_dataset_bytes=1024 * 1024, max_dataset_files=50)
    with running_app(settings) as running:
        yield running


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put_blob(client: TestClient, data: bytes, name: str | None = None, **params: str):  # noqa: ANN201
    return client.put(f"{API}/dataset-blobs/{name or sha(data)}", content=data, params=params)


def manifest_of(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    modes = modes or {}
    entries = [
        ManifestFile(path, len(data), modes.get(path, 0o644), sha(data))
        for path, data in files.items()
    ]
    return manifest_bytes(entries)


def upload(client: TestClient, name: str, files: dict[str, bytes], **body: object) -> dict:
    """The whole protocol, as a client runs it; the plan and the committed version."""
    manifest = manifest_of(files)
    assert put_blob(client, manifest).status_code == 200
    plan = client.post(f"{API}/datasets/{name}/uploads", json={"manifest": sha(manifest)})
    assert plan.status_code == 200, plan.text
    by_sha = {sha(data): data for data in files.values()}
    for missing in plan.json()["missing"]:
        assert put_blob(client, by_sha[missing]).status_code == 200
    made = client.post(f"{API}/datasets/{name}/versions", json={"manifest": sha(manifest), **body})
    assert made.status_code == 201, made.text
    return {"plan": plan.json(), "version": made.json()}


def test_a_directory_uploads_as_numbered_versions_that_send_only_what_changed(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    files = {f"train/{i}.txt": f"sample {i}\n".encode() * 10 for i in range(10)}
    files["labels.csv"] = b"a,b\n"
    first = upload(client, "images", files, description="first cut")

    assert first["plan"]["file_count"] == 11
    assert len(first["plan"]["missing"]) == 11
    assert first["version"]["version"] == 1
    assert first["version"]["description"] == "first cut"
    changed = dict(files, **{"train/3.txt": b"changed\n"})
    second = upload(client, "images", changed)
    assert second["plan"]["missing"] == [sha(b"changed\n")]  # only the changed file
    assert second["plan"]["missing_bytes"] == len(b"changed\n")
    assert second["version"]["version"] == 2

    shown = client.get(f"{API}/datasets/images/versions/1").json()
    assert shown["file_count"] == 11 and shown["blob_count"] == 11
    assert shown["size_bytes"] == sum(len(d) for d in files.values())
    assert {f["path"]: f["sha256"] for f in shown["files"]} == {p: sha(d) for p, d in files.items()}
    assert shown["created_by"] == "admin"
    detail = client.get(f"{API}/datasets/images").json()
    assert [v["version"] for v in detail["versions"]] == [2, 1]
    assert detail["latest_version"] == 2
    listed = client.get(f"{API}/datasets").json()
    assert [(d["name"], d["version_count"]) for d in listed] == [("images", 2)]
    # the bytes are in the store, once each, read-only
    blob = platform.settings.datasets_dir / "blobs" / sha(b"changed\n")[:2] / sha(b"changed\n")
    assert blob.read_bytes() == b"changed\n"
    assert blob.stat().st_mode & 0o777 == 0o444


def test_a_commit_without_every_blob_names_what_is_missing(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    files = {"a.bin": os.urandom(100), "b.bin": os.urandom(100)}
    manifest = manifest_of(files)
    put_blob(client, manifest)
    put_blob(client, files["a.bin"])

    answer = client.post(f"{API}/datasets/partial/versions", json={"manifest": sha(manifest)})

    body = refused(answer, 409, "blobs_missing")
    assert body["details"]["missing"] == [sha(files["b.bin"])]
    refused(client.get(f"{API}/datasets/partial"), 404, "not_found")  # nothing was made


def test_a_blob_whose_bytes_differ_from_its_name_is_refused(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    answer = put_blob(client, b"these bytes", name=sha(b"other bytes"))

    refused(answer, 422, "blob_hash_mismatch")
    name = sha(b"other bytes")
    kept = platform.settings.datasets_dir / "blobs" / name[:2] / name
    assert not kept.exists()  # (its shard may exist: other tests keep random blobs)
    assert list((platform.settings.datasets_dir / "incoming").glob("*.part")) == []


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "/etc/passwd"},
        {"path": "../outside.txt"},
        {"path": "a/../../b"},
        {"path": "a//b"},
        {"path": "./a"},
        {"path": "a\u0000b"},
        {"mode": 0o4755},
        {"size": -1},
        {"sha256": "not-a-hash"},
    ],
)
def test_hostile_manifests_are_refused(app: tuple[TestClient, Platform], entry: dict) -> None:
    client, _ = app
    good = {"path": "x.txt", "size": 1, "mode": 0o644, "sha256": sha(b"x")}
    manifest = json.dumps({"version": 1, "files": [good | entry]}).encode()
    put_blob(client, manifest)

    for route in ("uploads", "versions"):
        answer = client.post(f"{API}/datasets/hostile/{route}", json={"manifest": sha(manifest)})
        refused(answer, 422, "bad_manifest")


@pytest.mark.parametrize(
    "paths", [["x.txt", "x.txt"], ["data", "data/inner.txt"], ["a/b", "a/b/c/d"]]
)
def test_a_path_twice_or_below_a_file_is_refused(
    app: tuple[TestClient, Platform], paths: list[str]
) -> None:
    client, _ = app
    entries = [{"path": p, "size": 1, "mode": 0o644, "sha256": sha(b"x")} for p in paths]
    manifest = json.dumps({"version": 1, "files": entries}).encode()
    put_blob(client, manifest)

    answer = client.post(f"{API}/datasets/tree/uploads", json={"manifest": sha(manifest)})

    assert refused(answer, 422, "bad_manifest")["details"]["path"] == paths[1]


def test_versions_over_the_limits_are_refused_with_413(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    many = manifest_of({f"{i}.txt": str(i).encode() for i in range(51)})
    put_blob(client, many)
    refused(
        client.post(f"{API}/datasets/big/uploads", json={"manifest": sha(many)}),
        413,
        "dataset_too_large",
    )
    big = json.dumps(
        {"version": 1, "files": [{"path": "a", "size": 2**21, "mode": 420, "sha256": "0" * 64}]}
    ).encode()
    put_blob(client, big)
    refused(
        client.post(f"{API}/datasets/big/uploads", json={"manifest": sha(big)}),
        413,
        "dataset_too_large",
    )
    answer = client.put(f"{API}/dataset-blobs/{'0' * 64}", content=b"\0" * (2**20 + 1))
    refused(answer, 413, "dataset_too_large")


def test_bad_names_and_bodies_get_a_clear_422(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    put_blob(client, manifest_of({"a": b"a"}))
    body = {"manifest": sha(manifest_of({"a": b"a"}))}
    refused(client.post(f"{API}/datasets/-bad/uploads", json=body), 422, "invalid_dataset_name")
    both = {**body, "from_job": 1}
    refused(client.post(f"{API}/datasets/ok/versions", json=both), 422, "invalid_request")


def test_a_version_is_made_from_a_jobs_outputs_on_the_server(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    script = (
        'cd "$GPUPOOL_OUTPUT_DIR" && mkdir -p shards/sub && echo one > shards/1.txt'
        " && echo two > shards/sub/2.txt && printf '#!/bin/sh\\n' > shards/run.sh"
        " && chmod 755 shards/run.sh && echo skip > other.txt"
    )
    job = submit(client, ["sh", "-c", script])
    running = submit(client, ["sleep", "300"])
    assert wait_job(client, job["id"])["status"] == "succeeded"

    made = client.post(
        f"{API}/datasets/shards/versions", json={"from_job": job["id"], "path": "shards"}
    )

    assert made.status_code == 201, made.text
    assert made.json()["source_job_id"] == job["id"]
    shown = client.get(f"{API}/datasets/shards/versions/1").json()
    assert {f["path"]: (f["sha256"], f["mode"]) for f in shown["files"]} == {
        "1.txt": (sha(b"one\n"), 0o644),
        "sub/2.txt": (sha(b"two\n"), 0o644),
        "run.sh": (sha(b"#!/bin/sh\n"), 0o755),
    }
    wait_job(client, running["id"], {"running"})
    early = {"from_job": running["id"]}
    refused(client.post(f"{API}/datasets/early/versions", json=early), 409, "job_not_ended")
    client.post(f"{API}/jobs/{running['id']}/cancel")


def test_a_version_in_use_by_a_job_that_has_not_ended_is_not_deleted(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    upload(client, "kept", {"a.txt": b"a"})
    upload(client, "kept", {"a.txt": b"b"})
    job = submit(client, ["sleep", "300"])
    with platform.db.session() as session:
        version_id = session.execute(
            text(
                "SELECT v.id FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id "
                "WHERE d.name = 'kept' AND v.number = 1"
            )
        ).scalar_one()
        session.add(DatasetUseModel(job_id=job["id"], version_id=version_id, mount="/d"))

    body = refused(client.delete(f"{API}/datasets/kept/versions/1"), 409, "dataset_in_use")
    assert body["details"]["jobs"] == [job["id"]]
    refused(client.delete(f"{API}/datasets/kept"), 409, "dataset_in_use")
    assert client.delete(f"{API}/datasets/kept/versions/2").status_code == 204
    client.post(f"{API}/jobs/{job['id']}/cancel")
    wait_job(client, job["id"])
    assert client.delete(f"{API}/datasets/kept/versions/1").status_code == 204
    refused(client.get(f"{API}/datasets/kept"), 404, "not_found")  # its last version went
    refused(client.delete(f"{API}/datasets/kept"), 404, "not_found")


def test_a_blob_may_be_sent_gzipped(app: tuple[TestClient, Platform]) -> None:
    client, platform = app
    manifest = manifest_of({"z.txt": b"zed"})
    packed = gzip.compress(manifest)
    headers = {"Content-Encoding": "gzip"}

    kept = client.put(f"{API}/dataset-blobs/{sha(manifest)}", content=packed, headers=headers)
    wrong = client.put(f"{API}/dataset-blobs/{sha(packed)}", content=packed, headers=headers)
    broken = client.put(f"{API}/dataset-blobs/{sha(b'x')}", content=b"not gzip", headers=headers)
    bomb = gzip.compress(b"\0" * (2**20 + 1))
    too_big = client.put(f"{API}/dataset-blobs/{'1' * 64}", content=bomb, headers=headers)
    other = client.put(
        f"{API}/dataset-blobs/{sha(b'x')}", content=b"x", headers={"Content-Encoding": "br"}
    )

    assert kept.json() == {"sha256": sha(manifest), "size": len(manifest)}
    path = platform.settings.datasets_dir / "blobs" / sha(manifest)[:2] / sha(manifest)
    assert path.read_bytes() == manifest
    refused(wrong, 422, "blob_hash_mismatch")
    refused(broken, 422, "invalid_request")
    refused(too_big, 413, "dataset_too_large")
    refused(other, 422, "invalid_request")
