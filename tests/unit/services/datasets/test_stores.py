"""The dataset store's port: the POSIX store and the S3 store (against moto's S3-protocol
server on 127.0.0.1, tests/support/s3.py: no real S3 server can be installed here) keep,
touch, read, list and remove blobs alike."""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import pytest

from gpupool.errors import DatasetStoreUnavailable
from gpupool.services.datasets import blob_store
from gpupool.services.datasets._stores import PosixStore, S3Store, _s3_store
from gpupool.settings import Settings
from tests.support.s3 import moto_server


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch):
    with moto_server(monkeypatch) as server:
        yield server
    _s3_store.cache_clear()


@pytest.fixture(params=["posix", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "posix":
        return PosixStore(tmp_path / "store")
    server = request.getfixturevalue("s3")
    return blob_store(Settings(data_dir=tmp_path / "data", **server.settings()))


def _blob(tmp_path: Path, data: bytes) -> tuple[str, Path]:
    path = tmp_path / f"part-{hashlib.sha256(data).hexdigest()[:8]}"
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest(), path


def test_a_blob_put_is_kept_read_and_listed(store, tmp_path: Path) -> None:
    sha, path = _blob(tmp_path, b"the bytes of one file\n" * 1000)
    assert not store.has(sha) and store.size(sha) is None and store.open(sha) is None
    store.put(sha, path)
    assert store.has(sha)
    assert store.size(sha) == 22_000
    file = store.open(sha)
    try:
        assert file.read() == b"the bytes of one file\n" * 1000
    finally:
        file.close()
    assert [found for found, _ in store.blobs()] == [sha]


def test_removal_leaves_a_blob_changed_since_and_takes_an_older_one(store, tmp_path) -> None:
    sha, path = _blob(tmp_path, b"collect me")
    store.put(sha, path)
    assert store.remove(sha, changed_before=time.time() - 3600) == 0  # changed a moment ago
    assert store.has(sha)
    assert store.remove(sha, changed_before=time.time() + 3600) > 0
    assert not store.has(sha)
    assert store.remove(sha, changed_before=time.time() + 3600) == 0  # gone already
    assert list(store.blobs()) == []


def test_a_second_put_touches_the_kept_blob(store, tmp_path: Path) -> None:
    """An upload of bytes kept already touches them: a collection that started before it
    leaves them to the upload."""
    sha, path = _blob(tmp_path, b"kept twice")
    store.put(sha, path)
    (first,) = [changed for _, changed in store.blobs()]
    time.sleep(1.1)  # S3 keeps LastModified to the second
    (tmp_path / "again").mkdir()
    _, again = _blob(tmp_path / "again", b"kept twice")
    store.put(sha, again)
    (second,) = [changed for _, changed in store.blobs()]
    assert second > first
    assert store.remove(sha, changed_before=second) == 0


def test_the_s3_store_keeps_its_blobs_below_the_prefix(s3, tmp_path: Path) -> None:
    store = blob_store(Settings(data_dir=tmp_path, **s3.settings()))
    assert isinstance(store, S3Store)
    sha, path = _blob(tmp_path, b"where")
    store.put(sha, path)
    assert s3.keys() == [f"gpupool/blobs/{sha[:2]}/{sha}"]
    assert not (tmp_path / "datasets" / "blobs").exists()  # the POSIX store stays empty


def test_without_a_bucket_the_s3_store_is_refused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, datasets_s3_endpoint="http://127.0.0.1:9")
    with pytest.raises(DatasetStoreUnavailable, match="GPUPOOL_DATASETS_S3_BUCKET"):
        blob_store(settings)


def test_without_boto3_the_error_names_the_extra(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 fails
    settings = Settings(
        data_dir=tmp_path, datasets_s3_endpoint="http://127.0.0.1:9", datasets_s3_bucket="b"
    )
    _s3_store.cache_clear()
    with pytest.raises(DatasetStoreUnavailable, match=r"gpupool\[s3\]"):
        blob_store(settings)


def test_a_store_that_does_not_answer_is_a_503_naming_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    settings = Settings(
        data_dir=tmp_path, datasets_s3_endpoint="http://127.0.0.1:9", datasets_s3_bucket="b"
    )
    _s3_store.cache_clear()
    store = blob_store(settings)
    with pytest.raises(DatasetStoreUnavailable, match="127.0.0.1:9") as raised:
        store.has("0" * 64)
    assert raised.value.status == 503
    _s3_store.cache_clear()


def test_a_blob_past_one_copys_limit_is_touched_by_uploading_it_again(
    s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = blob_store(Settings(data_dir=tmp_path, **s3.settings()))
    sha, path = _blob(tmp_path, b"a big blob")
    store.put(sha, path)
    (first,) = [changed for _, changed in store.blobs()]
    monkeypatch.setattr("gpupool.services.datasets._stores.MAX_COPY_BYTES", 3)
    calls = []
    real = store.client.upload_file
    monkeypatch.setattr(store.client, "upload_file", lambda *a: calls.append(a) or real(*a))
    time.sleep(1.1)
    (tmp_path / "x").mkdir()
    _, again = _blob(tmp_path / "x", b"a big blob")

    store.put(sha, again)

    assert len(calls) == 1
    (second,) = [changed for _, changed in store.blobs()]
    assert second > first


def test_a_blob_deleted_while_it_is_touched_is_uploaded_again(s3, tmp_path, monkeypatch) -> None:
    """A collection that deletes the blob between an upload's touch and its look after it:
    the upload keeps its own."""
    store = blob_store(Settings(data_dir=tmp_path, **s3.settings()))
    sha, path = _blob(tmp_path, b"collected meanwhile")
    store.put(sha, path)
    real = store.client.copy_object

    def copy_then_collected(**asked):  # noqa: ANN003, ANN202
        answer = real(**asked)
        store.client.delete_object(Bucket=s3.bucket, Key=store.key(sha))
        return answer

    monkeypatch.setattr(store.client, "copy_object", copy_then_collected)
    (tmp_path / "again").mkdir()
    _, again = _blob(tmp_path / "again", b"collected meanwhile")

    store.put(sha, again)

    file = store.open(sha)
    assert file is not None and file.read() == b"collected meanwhile"
    file.close()
