"""The node's cache of dataset versions (runner.datasets): a version is materialised once
from the store's blobs (hard links, copies for executables), read-only, shared by jobs that
start at once; a missing blob or a manifest that climbs out of its version is refused; the
attempt's progress file says what the runner does meanwhile, and is gone after."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from gpupool.domain.datasets import ManifestFile, blob_relpath, manifest_bytes
from gpupool.runner import datasets
from gpupool.runner.layout import PROGRESS_FILE
from gpupool.runner.wire import DatasetSpec


def store_with(store: Path, files: dict[str, tuple[bytes, int]]) -> str:
    """A store holding ``files`` (path -> (bytes, mode)) and their manifest; its hex."""
    entries = []
    for path, (data, mode) in files.items():
        entries.append(ManifestFile(path, len(data), mode, _keep(store, data)))
    return _keep(store, manifest_bytes(entries))


def _keep(store: Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    blob = store / blob_relpath(sha)
    blob.parent.mkdir(parents=True, exist_ok=True)
    if not blob.exists():
        blob.write_bytes(data)
        blob.chmod(0o444)
    return sha


def test_a_version_is_made_of_links_to_the_blobs_read_only(tmp_path: Path) -> None:
    store = tmp_path / "store"
    manifest = store_with(
        store, {"a/b.txt": (b"bee", 0o644), "run.sh": (b"#!/bin/sh\n", 0o755), "c": (b"", 0o644)}
    )
    path = tmp_path / "cache" / manifest

    datasets.materialise(manifest, str(store), str(path))

    assert (path / "a" / "b.txt").read_bytes() == b"bee"
    blob = store / blob_relpath(hashlib.sha256(b"bee").hexdigest())
    assert os.path.samefile(path / "a" / "b.txt", blob)  # linked, not copied
    assert not os.path.samefile(path / "run.sh", store / blob_relpath(_keep(store, b"#!/bin/sh\n")))
    assert (path / "run.sh").stat().st_mode & 0o777 == 0o555
    assert (path / "a" / "b.txt").stat().st_mode & 0o777 == 0o444
    assert (path / "a").stat().st_mode & 0o777 == 0o555
    assert not (tmp_path / "cache" / f"{manifest}.part").exists()


def test_jobs_starting_at_once_build_it_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    manifest = store_with(store, {f"{i}.txt": (str(i).encode(), 0o644) for i in range(300)})
    path = tmp_path / "cache" / manifest
    builds = []
    real = datasets._build

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        builds.append(1)
        return real(*args, **kwargs)

    datasets._build = counted
    try:
        threads = [
            threading.Thread(target=datasets.materialise, args=(manifest, str(store), str(path)))
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        datasets._build = real

    assert len(builds) == 1
    assert len(os.listdir(path)) == 300


def test_a_missing_blob_or_a_climbing_manifest_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    manifest = store_with(store, {"x": (b"x", 0o644)})
    os.unlink(store / blob_relpath(hashlib.sha256(b"x").hexdigest()))
    with pytest.raises(datasets.Missing, match="blob"):
        datasets.materialise(manifest, str(store), str(tmp_path / "cache" / manifest))
    entry = {"path": "../../escape", "size": 1, "mode": 420, "sha256": "0" * 64}
    climbing = _keep(store, json.dumps({"version": 1, "files": [entry]}).encode())
    with pytest.raises(datasets.Missing, match="outside"):
        datasets.materialise(climbing, str(store), str(tmp_path / "cache" / climbing))
    assert not (tmp_path / "escape").exists()
    with pytest.raises(datasets.Missing, match="manifest"):
        datasets.materialise("1" * 64, str(store), str(tmp_path / "cache" / ("1" * 64)))


def test_ensure_says_what_it_does_and_records_a_failure(tmp_path: Path) -> None:
    store = tmp_path / "store"
    manifest = store_with(store, {f"{i}": (b"d" * i, 0o644) for i in range(50)})
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    said = []
    spec = DatasetSpec(
        {
            "name": "d",
            "version": 2,
            "manifest": manifest,
            "store": str(store),
            "path": str(tmp_path / "cache" / manifest),
        }
    )
    real = datasets._Progress.for_

    def watched(self, label):  # noqa: ANN001, ANN202
        say = real(self, label)
        said.append(json.loads(Path(self.path).read_text()))
        return say

    datasets._Progress.for_ = watched
    try:
        problem, held = datasets.ensure([spec], str(attempt), lambda: False)
    finally:
        datasets._Progress.for_ = real
    assert problem is None and len(held) == 1
    for fd in held:
        os.close(fd)
    assert said[0]["reason"] == "DatasetFetching" and "d:2" in said[0]["message"]
    assert not (attempt / PROGRESS_FILE).exists()
    gone = DatasetSpec(
        {
            **{"manifest": "2" * 64, "store": str(store)},
            "path": str(tmp_path / "cache" / ("2" * 64)),
        }
    )
    (code, message), held = datasets.ensure([gone], str(attempt), lambda: False)
    assert code == 125 and "missing" in message and held == []
