"""A node's cache of dataset versions kept under GPUPOOL_DATASET_CACHE_MAX_BYTES, with real
jobs in their sandbox: a job that materialises a version past the limit has the least
recently used version no job holds removed (its log says so); a version a running job reads
stays; a job that reads a removed version again has it materialised again."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.integration.api.test_datasets_jobs import log, upload
from tests.support.platform import make_settings, running_app, submit, wait_job

API = "/api/v1"
MiB = 2**20


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Platform]]:
    data = tmp_path_factory.mktemp("dataset-cache") / "data"
    settings = make_settings(data, dataset_cache_max_bytes=3 * MiB)
    with running_app(settings) as running:
        yield running


def cached(platform: Platform, job: dict) -> Path:
    return platform.settings.dataset_cache_dir / job["spec"]["datasets"][0]["manifest"]


def long_unused(path: Path) -> None:
    """As if its last job ran an hour ago (a version used in the last minute stays)."""
    lock = path.parent / f".{path.name}.lock"
    os.utime(lock, (time.time() - 3600,) * 2)


def test_past_the_limit_the_least_recently_used_unheld_version_goes(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    for name in ("old", "held", "new"):
        upload(client, name, {"data.bin": os.urandom(2 * MiB)})
    old = submit(client, ["true"], datasets=["old"])
    assert wait_job(client, old["id"])["status"] == "succeeded"
    assert client.post(f"{API}/volumes", json={"name": "control"}).status_code == 201
    wait = "while [ ! -e /control/release ]; do sleep 0.05; done"
    held = submit(client, ["sh", "-c", wait], datasets=["held"], volumes=["control:/control"])
    held = wait_job(client, held["id"], {"running"})
    release = platform.settings.volumes_dir / str(held["spec"]["volumes"][0]["id"]) / "release"
    for job in (old, held):
        long_unused(cached(platform, job))

    new = submit(client, ["true"], datasets=["new"])
    assert wait_job(client, new["id"])["status"] == "succeeded", log(client, new["id"])

    assert not cached(platform, old).exists()
    assert cached(platform, held).is_dir() and cached(platform, new).is_dir()
    said = log(client, new["id"])
    assert "dataset versions on this node past 3 MiB: removed 1 unused version(s)" in said
    release.touch()
    assert wait_job(client, held["id"])["status"] == "succeeded"
    again = submit(client, ["cat", "/datasets/old/data.bin"], datasets=["old"])
    assert wait_job(client, again["id"])["status"] == "succeeded"
    assert cached(platform, old).is_dir()
