"""Jobs that read datasets, in process, with real jobs in their real sandbox: the version is
resolved at submit and recorded on the job, materialised once into the node's cache (hard
links to the store's blobs), shown read-only at /datasets/NAME (or the mount asked for) with
GPUPOOL_DATASET_<NAME> saying where; a job cannot write into it; a version a live job reads
cannot be deleted."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.domain.datasets import ManifestFile, manifest_bytes
from gpupool.services.platform import Platform
from tests.support.platform import make_settings, refused, running_app, submit, wait_job

API = "/api/v1"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    data = tmp_path_factory.mktemp("dataset-jobs") / "data"
    with running_app(make_settings(data)) as running:
        yield running


def upload(client: TestClient, name: str, files: dict[str, bytes], mode: int = 0o644) -> int:
    """A version of ``name`` holding ``files``; its number."""
    entries = [
        ManifestFile(p, len(d), mode, hashlib.sha256(d).hexdigest()) for p, d in files.items()
    ]
    manifest = manifest_bytes(entries)
    for blob in [manifest, *files.values()]:
        sha = hashlib.sha256(blob).hexdigest()
        assert client.put(f"{API}/dataset-blobs/{sha}", content=blob).status_code == 200
    body = {"manifest": hashlib.sha256(manifest).hexdigest()}
    made = client.post(f"{API}/datasets/{name}/versions", json=body)
    assert made.status_code == 201, made.text
    return made.json()["version"]


def log(client: TestClient, job_id: int) -> str:
    return client.get(f"{API}/jobs/{job_id}/logs").json()["text"]


def test_a_job_reads_the_version_recorded_at_submit_read_only(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    upload(client, "corpus", {"a.txt": b"first\n", "sub/b.txt": b"bee\n"})
    script = (
        'echo "at=$GPUPOOL_DATASET_CORPUS"; cat /datasets/corpus/a.txt /datasets/corpus/sub/b.txt;'
        " if echo x > /datasets/corpus/new.txt 2>/dev/null; then echo WROTE; fi;"
        " if echo x >> /datasets/corpus/a.txt 2>/dev/null; then echo CHANGED; fi;"
        " if rm -f /datasets/corpus/a.txt 2>/dev/null && test ! -e /datasets/corpus/a.txt;"
        " then echo REMOVED; fi; true"
    )

    job = submit(client, ["sh", "-c", script], datasets=["corpus"])
    upload(client, "corpus", {"a.txt": b"second\n"})  # after the submit: not what it reads

    assert job["spec"]["datasets"][0]["version"] == 1
    assert job["spec"]["datasets"][0]["mount"] == "/datasets/corpus"
    assert wait_job(client, job["id"])["status"] == "succeeded"
    text = log(client, job["id"])
    assert "at=/datasets/corpus" in text
    assert "first\nbee\n" in text
    assert "WROTE" not in text and "CHANGED" not in text and "REMOVED" not in text
    cache = platform.settings.dataset_cache_dir
    [kept] = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert (kept / "a.txt").read_bytes() == b"first\n"
    assert (kept / "a.txt").stat().st_mode & 0o777 == 0o444
    assert (kept / "a.txt").stat().st_nlink >= 2  # a hard link to the store's blob


def test_a_version_and_a_mount_can_be_named(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    upload(client, "tools", {"run.sh": b"#!/bin/sh\necho ran tool\n"}, mode=0o755)
    upload(client, "tools", {"run.sh": b"#!/bin/sh\necho newer\n"}, mode=0o755)

    job = submit(
        client,
        ["sh", "-c", "$GPUPOOL_DATASET_TOOLS/run.sh; ls /data/tools"],
        datasets=[{"name": "tools", "version": 1, "mount": "/data/tools"}],
    )

    assert wait_job(client, job["id"])["status"] == "succeeded"
    assert "ran tool\nrun.sh" in log(client, job["id"])


def test_a_missing_dataset_or_version_is_refused_at_submit(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    upload(client, "small", {"x": b"x"})
    for bad in (["nothing"], ["small:9"]):
        answer = client.post(f"{API}/jobs", json={"command": ["true"], "datasets": bad})
        refused(answer, 404, "not_found")
    for bad in (["small:/proc/x"], ["small:/a", "small:/a"], ["../etc"], ["small:0"]):
        answer = client.post(f"{API}/jobs", json={"command": ["true"], "datasets": bad})
        assert answer.status_code == 422, (bad, answer.text)


def test_a_version_a_running_job_reads_is_not_deleted(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    upload(client, "held", {"x": b"held"})
    job = submit(client, ["sleep", "300"], datasets=["held"])
    wait_job(client, job["id"], {"running"})

    body = refused(client.delete(f"{API}/datasets/held/versions/1"), 409, "dataset_in_use")

    assert body["details"]["jobs"] == [job["id"]]
    client.post(f"{API}/jobs/{job['id']}/cancel")
    wait_job(client, job["id"])
    assert client.delete(f"{API}/datasets/held").status_code == 204


def test_every_task_of_an_array_keeps_its_version(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    upload(client, "shards", {"0.txt": b"zero\n"})
    body = {"command": ["sleep", "300"], "datasets": ["shards"], "array": {"indexes": "0-2"}}
    made = client.post(f"{API}/jobs", json=body)
    assert made.status_code == 201, made.text
    ids = made.json()["job_ids"]

    answer = refused(client.delete(f"{API}/datasets/shards"), 409, "dataset_in_use")

    assert answer["details"]["jobs"] == sorted(ids)
    client.post(f"{API}/jobs/arrays/{ids[0]}/cancel")
    for job_id in ids:
        wait_job(client, job_id)
    assert client.delete(f"{API}/datasets/shards").status_code == 204
