"""The dataset store is collected: once a dataset (or a version) is deleted, the blobs no
version references any more leave the store, and a team stops holding (and paying for) the
blobs none of its versions references; a blob another version shares stays, and so does a
blob uploaded for a version not committed yet, for the grace an upload has. Through the
API, on a real SQLite file and PostgreSQL; the storage pipeline runs the sweep by itself."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from gpupool.scheduler.types import Clock
from gpupool.services import datasets
from gpupool.services.datasets._blobs import keep_bytes, remove_blob
from gpupool.services.platform import Platform
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import DatasetBlobModel
from tests.integration.api.test_datasets_api import put_blob, sha, upload
from tests.support.platform import make_settings, running_app
from tests.support.waiting import wait_for

API = "/api/v1"
HOUR = 3600.0


@dataclass
class Sweeper:
    """What a sweep needs (``services.datasets._ports.Stores``), with its own grace."""

    db: Database
    clock: Clock
    settings: Settings


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[TestClient, Platform]]:
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").migrated_database()
    with running_app(make_settings(tmp_path / "data", url)) as running:
        yield running


def sweeper(platform: Platform, grace: float = HOUR) -> Sweeper:
    settings = platform.settings.model_copy(update={"dataset_blob_grace_seconds": grace})
    return Sweeper(platform.db, platform.clock, settings)


def stored(platform: Platform, data: bytes) -> bool:
    digest = sha(data)
    return (platform.settings.datasets_dir / "blobs" / digest[:2] / digest).exists()


def held(platform: Platform) -> set[str]:
    with platform.db.reader() as session:
        return set(session.scalars(select(DatasetBlobModel.sha256)))


def age_everything(platform: Platform, seconds: float) -> None:
    """Every blob kept and held so far, as if uploaded ``seconds`` ago."""
    with platform.db.session() as session:
        session.execute(update(DatasetBlobModel).values(created_at=platform.clock.now() - seconds))
    then = time.time() - seconds
    for directory, _dirs, files in os.walk(platform.settings.datasets_dir / "blobs"):
        for name in files:
            os.utime(os.path.join(directory, name), (then, then))


def test_a_deleted_datasets_own_blobs_go_and_shared_or_fresh_ones_stay(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    own, shared, other = os.urandom(3000), os.urandom(2000), os.urandom(1000)
    first = upload(client, "raw", {"own.bin": own, "shared.bin": shared})
    upload(client, "clean", {"other.bin": other, "shared.bin": shared})
    raw_manifest = first["version"]["manifest"].removeprefix("sha256:")
    age_everything(platform, 2 * HOUR)
    in_flight = os.urandom(500)  # uploaded for a version not committed yet
    assert put_blob(client, in_flight).status_code == 200
    assert client.delete(f"{API}/datasets/raw").status_code == 204

    assert datasets.collect_blobs(sweeper(platform, grace=3 * HOUR)) == datasets.BlobsCollected()
    assert stored(platform, own)  # nothing past a grace longer than its age

    done = datasets.collect_blobs(sweeper(platform))
    # the team stops holding what no version of its references: the file goes next sweep
    assert done.holdings == 2 and done.blobs == 0
    assert sha(own) not in held(platform) and raw_manifest not in held(platform)
    assert sha(in_flight) in held(platform) and sha(shared) in held(platform)

    done = datasets.collect_blobs(sweeper(platform))
    assert done.blobs == 2 and done.bytes > 0 and done.holdings == 0
    assert not stored(platform, own)
    assert not (platform.settings.datasets_dir / "blobs" / raw_manifest[:2] / raw_manifest).exists()
    assert stored(platform, shared) and stored(platform, other) and stored(platform, in_flight)
    assert client.get(f"{API}/datasets/clean/versions/1").status_code == 200

    # the blob in flight is committed after all; the deleted one is uploaded again
    again = upload(client, "raw", {"own.bin": own, "late.bin": in_flight})
    assert again["plan"]["missing"] == [sha(own)]
    assert stored(platform, own)


def test_an_upload_that_keeps_a_blob_being_collected_keeps_it(
    app: tuple[TestClient, Platform],
) -> None:
    """The sweep renames a blob away before it removes it, and looks again: one an upload
    kept again (touched) meanwhile is put back; an upload after finds it gone and keeps
    its own bytes."""
    _, platform = app
    data = os.urandom(100)
    digest = keep_bytes(platform.settings, data)
    path = platform.settings.datasets_dir / "blobs" / digest[:2] / digest
    os.utime(path, (time.time() - 2 * HOUR,) * 2)
    keep_bytes(platform.settings, data)  # kept again: touched
    assert remove_blob(platform.settings, digest, time.time() - HOUR) == 0
    assert path.read_bytes() == data
    os.utime(path, (time.time() - 2 * HOUR,) * 2)
    assert remove_blob(platform.settings, digest, time.time() - HOUR) > 0
    assert not path.exists()
    assert keep_bytes(platform.settings, data) == digest
    assert path.read_bytes() == data


def test_the_storage_pipeline_sweeps_by_itself_and_says_what_it_freed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(
        tmp_path / "data",
        None,
        dataset_gc_seconds=0.2,
        # long enough for the upload below to commit before its blobs can be swept (with
        # no grace a sweep between the manifest's PUT and the commit takes the holding)
        dataset_blob_grace_seconds=3,
        storage_scan_seconds=0.2,
    )
    caplog.set_level(logging.WARNING, logger="gpupool.services.datasets._gc")
    with running_app(settings) as (client, platform):
        gone = os.urandom(4000)
        upload(client, "scratch", {"gone.bin": gone})
        assert client.delete(f"{API}/datasets/scratch").status_code == 204
        wait_for(lambda: not stored(platform, gone), 30, "the sweep to remove the blob")
    said = [r.getMessage() for r in caplog.records if "dataset blobs" in r.getMessage()]
    assert any("no dataset version references" in line and "freed" in line for line in said)


def test_a_store_that_lost_a_manifest_is_not_swept(app: tuple[TestClient, Platform]) -> None:
    """Without a version's manifest the sweep cannot tell which blobs it needs: it removes
    nothing, and says why."""
    client, platform = app
    kept = upload(client, "kept", {"k.bin": os.urandom(100)})
    gone = os.urandom(200)
    upload(client, "gone", {"g.bin": gone})
    assert client.delete(f"{API}/datasets/gone").status_code == 204
    age_everything(platform, 2 * HOUR)
    manifest = kept["version"]["manifest"].removeprefix("sha256:")
    (platform.settings.datasets_dir / "blobs" / manifest[:2] / manifest).unlink()

    assert datasets.collect_blobs(sweeper(platform)) == datasets.BlobsCollected()
    assert stored(platform, gone) and sha(gone) in held(platform)
