"""Materialising a version whose blobs an S3-compatible store keeps: the runner spawns
``gpupool.executors.blobfetch`` (this interpreter, the node's own AWS credentials) to fetch
them beside the version, links the version from there and removes what it fetched. The
store is moto's S3-protocol server on 127.0.0.1 (tests/support/s3.py: no real S3 server can
be installed here)."""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

import pytest

from gpupool.domain.datasets import ManifestFile, blob_relpath, manifest_bytes
from gpupool.runner import datasets
from gpupool.runner.wire import DatasetSpec, SpecError
from tests.support.s3 import S3Server, moto_server


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch):
    with moto_server(monkeypatch) as server:
        yield server


def bucket_with(s3: S3Server, files: dict[str, tuple[bytes, int]]) -> str:
    """The bucket holding ``files`` (path -> (bytes, mode)) and their manifest; its hex."""
    client = s3.client()

    def keep(data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        client.put_object(Bucket=s3.bucket, Key=f"{s3.prefix}{blob_relpath(sha)}", Body=data)
        return sha

    entries = [ManifestFile(p, len(data), mode, keep(data)) for p, (data, mode) in files.items()]
    return keep(manifest_bytes(entries))


def _of(s3: S3Server) -> dict[str, str]:
    return {
        "endpoint": s3.endpoint,
        "bucket": s3.bucket,
        "prefix": s3.prefix,
        "region": "us-east-1",
    }


def test_a_version_is_fetched_linked_and_its_fetched_blobs_removed(s3, tmp_path: Path) -> None:
    files = {f"part/{i}.bin": (os.urandom(1000 + i), 0o644) for i in range(30)}
    files["run.sh"] = (b"#!/bin/sh\necho hi\n", 0o755)
    files["same-as-0"] = (files["part/0.bin"][0], 0o644)  # one blob, two files
    manifest = bucket_with(s3, files)
    path = tmp_path / "cache" / manifest
    said: list[str] = []

    datasets.materialise(manifest, "/nonexistent", str(path), say=said.append, s3=_of(s3))

    for name, (data, _mode) in files.items():
        assert (path / name).read_bytes() == data
    assert (path / "run.sh").stat().st_mode & 0o777 == 0o555
    assert (path / "part" / "0.bin").stat().st_mode & 0o777 == 0o444
    assert os.path.samefile(path / "part" / "0.bin", path / "same-as-0")  # one fetch, linked
    assert sorted(os.listdir(tmp_path / "cache")) == [f".{manifest}.lock", manifest]
    assert all("blobs" in line for line in said)


def test_a_blob_missing_from_the_bucket_is_refused_and_nothing_is_left(s3, tmp_path) -> None:
    manifest = bucket_with(s3, {"a": (b"here", 0o644), "b": (b"gone", 0o644)})
    gone = hashlib.sha256(b"gone").hexdigest()
    s3.client().delete_object(Bucket=s3.bucket, Key=f"{s3.prefix}{blob_relpath(gone)}")
    path = tmp_path / "cache" / manifest

    with pytest.raises(datasets.Missing, match=gone):
        datasets.materialise(manifest, "/nonexistent", str(path), s3=_of(s3))
    assert sorted(os.listdir(tmp_path / "cache")) == [f".{manifest}.lock"]


def test_without_credentials_the_fetch_fails_with_the_stores_answer(s3, tmp_path, monkeypatch):
    manifest = bucket_with(s3, {"a": (b"here", 0o644)})
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(OSError, match="fetching from s3://"):
        datasets.materialise(manifest, "/nonexistent", str(tmp_path / "c" / manifest), s3=_of(s3))


def test_ensure_records_a_missing_version_of_the_s3_store(s3, tmp_path: Path) -> None:
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    spec = DatasetSpec(
        {
            "name": "d",
            "version": 1,
            "manifest": "3" * 64,
            "store": "/nonexistent",
            "path": str(tmp_path / "cache" / ("3" * 64)),
            "s3": _of(s3),
        }
    )
    (code, message), held = datasets.ensure([spec], str(attempt), lambda: False)
    assert held == [] and "missing from the dataset store" in message and "3" * 64 in message


def test_the_spec_refuses_an_s3_store_without_its_bucket() -> None:
    with pytest.raises(SpecError, match="s3"):
        DatasetSpec(
            {"manifest": "3" * 64, "store": "/s", "path": "/p", "s3": {"endpoint": "http://x"}}
        )


def test_a_fetch_cut_short_is_swept_unless_one_is_under_way(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    left, busy = cache / f".fetch-{'4' * 64}", cache / f".fetch-{'5' * 64}"
    for fetched in (left, busy):
        (fetched / "blobs" / "ab").mkdir(parents=True)
        (fetched / "blobs" / "ab" / ("ab" * 32)).write_bytes(b"part")
    fd = datasets._open_lock(str(cache / ("5" * 64)))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a fetch of that version is under way

        datasets.sweep_fetches(str(cache))

        assert not left.exists()
        assert (busy / "blobs" / "ab" / ("ab" * 32)).read_bytes() == b"part"
    finally:
        os.close(fd)
