"""The S3-compatible dataset store end to end: a real server (GPUPOOL_DATASETS_S3_*) and
the real CLI put a directory's blobs into the bucket (the POSIX store stays empty), a
1 %-changed copy sends only its changed blob, a job reads the exact files (its node fetched
them with its own credentials), and a sweep deletes the blobs no version references from
the bucket. The store is moto's S3-protocol server on 127.0.0.1 (tests/support/s3.py: no
real S3 server can be installed here)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from gpupool.domain.datasets import ManifestFile, blob_relpath, manifest_bytes
from gpupool.scheduler.types import Clock
from gpupool.services.datasets import collect_blobs
from gpupool.services.platform import Platform
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import DatasetBlobModel
from tests.support.cli import FINAL, Cli, wait_for
from tests.support.platform import make_settings, running_app, submit, wait_job
from tests.support.s3 import S3Server, moto_server
from tests.support.server import ServerProcess, free_port

API = "/api/v1"
HOUR = 3600.0


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with moto_server() as server:
        yield server


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("s3") / "data", env=s3.env()).start()
    yield process
    process.stop()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_keys(s3: S3Server, *blobs: bytes) -> set[str]:
    return {f"{s3.prefix}{blob_relpath(sha(b))}" for b in blobs}


def ended(pool: ServerProcess, job_id: int) -> dict:
    def job() -> dict | None:
        answer = httpx.get(
            f"{pool.url}{API}/jobs/{job_id}", headers={"Authorization": f"Bearer {pool.token}"}
        ).json()
        return answer if answer["status"] in FINAL else None

    return wait_for(job, what=f"job {job_id} to end")


def test_the_cli_uploads_into_the_bucket_and_a_job_reads_the_exact_files(
    pool: ServerProcess, s3: S3Server, tmp_path: Path
) -> None:
    admin = Cli(pool.url, pool.token)
    data = tmp_path / "corpus"
    data.mkdir()
    files = {f"shard-{i:03}.bin": os.urandom(2000) for i in range(100)}
    for name, content in files.items():
        (data / name).write_bytes(content)

    first = admin.ok("dataset", "create", "corpus", "--from", str(data))
    after_first = set(s3.keys())
    files["shard-042.bin"] = b"changed: one file of the hundred"
    (data / "shard-042.bin").write_bytes(files["shard-042.bin"])
    second = admin.ok("dataset", "create", "corpus", "--from", str(data))

    assert "uploaded 100 blobs" in first, first
    assert blob_keys(s3, *files.values()) - blob_keys(s3, files["shard-042.bin"]) < after_first
    assert len(after_first) == 101  # the files and the manifest
    assert "uploaded 1 blobs" in second, second  # the changed file only (and the manifest)
    assert len(s3.keys()) == 103
    assert not (pool.data_dir / "datasets" / "blobs").exists()  # the POSIX store stays empty

    script = 'cd "$GPUPOOL_DATASET_CORPUS" && sha256sum *'
    job_id = admin.submit("--dataset", "corpus:2", "--", "sh", "-c", script)
    job = ended(pool, job_id)
    log = httpx.get(
        f"{pool.url}{API}/jobs/{job_id}/logs", headers={"Authorization": f"Bearer {pool.token}"}
    ).json()["text"]

    assert job["status"] == "succeeded", log
    expected = {f"{sha(content)}  {name}" for name, content in files.items()}
    assert set(log.splitlines()) == expected and len(log.splitlines()) == 100
    cache = pool.data_dir / "dataset-cache"
    assert not [name for name in os.listdir(cache) if name.startswith(".fetch-")]


# -- the collection, in process (its grace period shortened) ----------------------------------


@pytest.fixture
def app(
    tmp_path: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, Platform]]:
    for name, value in s3.env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    with running_app(
        make_settings(tmp_path / "data", **(s3.settings() | {"datasets_s3_prefix": "gc/"}))
    ) as running:
        yield running


@dataclass
class Sweeper:
    db: Database
    clock: Clock
    settings: Settings


def upload(client: TestClient, name: str, files: dict[str, bytes]) -> None:
    manifest = manifest_bytes([ManifestFile(p, len(d), 0o644, sha(d)) for p, d in files.items()])
    for blob in [manifest, *files.values()]:
        assert client.put(f"{API}/dataset-blobs/{sha(blob)}", content=blob).status_code == 200
    made = client.post(f"{API}/datasets/{name}/versions", json={"manifest": sha(manifest)})
    assert made.status_code == 201, made.text


def test_a_sweep_deletes_the_blobs_no_version_references_from_the_bucket(
    app: tuple[TestClient, Platform], s3: S3Server
) -> None:
    client, platform = app
    shared, own, kept = b"in both versions", b"only in the deleted one", b"only in the kept one"
    upload(client, "old", {"shared": shared, "own": own})
    upload(client, "new", {"shared": shared, "kept": kept})
    gc = S3Server(s3.endpoint, s3.bucket, prefix="gc/")
    assert blob_keys(gc, shared, own, kept) <= set(gc.keys())
    assert client.delete(f"{API}/datasets/old").status_code == 204
    with platform.db.session() as session:  # the holdings, as if uploaded an hour ago
        session.execute(update(DatasetBlobModel).values(created_at=platform.clock.now() - HOUR))
    time.sleep(1.1)  # S3 keeps LastModified to the second: the blobs are older than a grace of 0
    settings = platform.settings.model_copy(update={"dataset_blob_grace_seconds": 0.0})
    sweeper = Sweeper(platform.db, platform.clock, settings)

    collect_blobs(sweeper)  # forgets the team's holding of the deleted version's blobs
    done = collect_blobs(sweeper)  # and deletes them

    left = set(gc.keys())
    assert blob_keys(gc, shared, kept) <= left
    assert not blob_keys(gc, own) & left
    assert done.blobs >= 1


def test_a_version_made_from_a_jobs_outputs_lands_in_the_bucket(
    app: tuple[TestClient, Platform], s3: S3Server
) -> None:
    client, platform = app
    script = 'mkdir -p "$GPUPOOL_OUTPUT_DIR/out" && printf made > "$GPUPOOL_OUTPUT_DIR/out/a.txt"'
    job = submit(client, ["sh", "-c", script])
    assert wait_job(client, job["id"])["status"] == "succeeded"

    made = client.post(f"{API}/datasets/outs/versions", json={"from_job": job["id"], "path": "out"})

    assert made.status_code == 201, made.text
    gc = S3Server(s3.endpoint, s3.bucket, prefix="gc/")
    manifest = made.json()["manifest"].removeprefix("sha256:")
    assert {f"gc/{blob_relpath(sha(b'made'))}", f"gc/{blob_relpath(manifest)}"} <= set(gc.keys())
    shown = client.get(f"{API}/datasets/outs/versions/1").json()  # its manifest read back
    assert [(f["path"], f["sha256"]) for f in shown["files"]] == [("a.txt", sha(b"made"))]
    assert not (platform.settings.datasets_dir / "blobs").exists()


# -- the server refuses a store it cannot use, as it starts ------------------------------------


def _start(tmp_path: Path, env: dict[str, str], prelude: str = "") -> subprocess.CompletedProcess:
    code = (
        f"import sys; {prelude}sys.argv = ['gpupool', 'server', '--port', '{free_port()}'];"
        " from gpupool.main import main; main()"
    )
    env = os.environ | {"GPUPOOL_DATA_DIR": str(tmp_path / "data")} | env
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_server_refuses_to_start_on_an_s3_store_without_a_bucket(tmp_path: Path) -> None:
    ended = _start(tmp_path, {"GPUPOOL_DATASETS_S3_ENDPOINT": "http://127.0.0.1:9"})
    assert ended.returncode == 2, ended.stderr
    assert "error [dataset_store_unavailable]" in ended.stderr + ended.stdout
    assert "GPUPOOL_DATASETS_S3_BUCKET" in ended.stderr + ended.stdout
    assert "Traceback" not in ended.stderr


def test_the_server_refuses_to_start_on_an_s3_store_without_boto3(tmp_path: Path) -> None:
    env = {"GPUPOOL_DATASETS_S3_ENDPOINT": "http://127.0.0.1:9", "GPUPOOL_DATASETS_S3_BUCKET": "b"}
    ended = _start(tmp_path, env, prelude="sys.modules['boto3'] = None; ")
    assert ended.returncode == 2, ended.stderr
    assert "gpupool[s3]" in ended.stderr + ended.stdout
    assert "Traceback" not in ended.stderr
