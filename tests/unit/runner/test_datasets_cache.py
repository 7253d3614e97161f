"""A node keeps its cache of dataset versions under the admin's limit
(GPUPOOL_DATASET_CACHE_MAX_BYTES): past it, the least recently used versions that no job
holds (nor used in the last minute) are removed; a job holds its versions (a shared lock)
from its start to its end, and each use touches its recency."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

from gpupool.domain.datasets import ManifestFile, blob_relpath, manifest_bytes
from gpupool.runner import datasets, lru
from gpupool.runner.wire import DatasetSpec

MiB = 2**20


def version(store: Path, cache: Path, seed: str, used_ago: float, megabytes: int = 1) -> Path:
    """A version of one file of ``megabytes`` (its bytes from ``seed``) in ``store`` and
    materialised in ``cache``, last used ``used_ago`` seconds ago."""
    data = hashlib.sha256(seed.encode()).digest() * (megabytes * MiB // 32)
    sha = _keep(store, data)
    manifest = _keep(store, manifest_bytes([ManifestFile("data.bin", len(data), 0o644, sha)]))
    path = cache / manifest
    datasets.materialise(manifest, str(store), str(path))
    _used(path, used_ago)
    return path


def _used(path: Path, ago: float) -> None:
    at = time.time() - ago
    os.utime(path.parent / f".{path.name}.lock", (at, at))


def _keep(store: Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    blob = store / blob_relpath(sha)
    blob.parent.mkdir(parents=True, exist_ok=True)
    if not blob.exists():
        blob.write_bytes(data)
        blob.chmod(0o444)
    return sha


def spec(path: Path, store: Path, limit: int = 0) -> DatasetSpec:
    raw = {"name": "d", "version": 1, "manifest": path.name, "store": str(store)}
    return DatasetSpec({**raw, "path": str(path), "cache_max_bytes": limit})


def test_the_least_recently_used_versions_no_job_holds_go_first(tmp_path: Path) -> None:
    store, cache = tmp_path / "store", tmp_path / "cache"
    oldest = version(store, cache, "a", used_ago=3600)
    held = version(store, cache, "b", used_ago=7200)  # older still, but a job holds it
    recent = version(store, cache, "c", used_ago=10)  # used a moment ago
    newer = version(store, cache, "d", used_ago=600)
    holder = os.open(cache / f".{held.name}.lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_SH)  # its job's runner
    try:
        said = datasets.collect(str(cache), lru.usage(str(cache)) - MiB // 2)
    finally:
        os.close(holder)
    assert not oldest.exists()
    assert held.exists() and recent.exists() and newer.exists()
    assert f"removed 1 unused version(s) ({oldest.name[:12]})" in said
    assert said.startswith("dataset versions on this node past")
    assert not [name for name in os.listdir(cache) if name.endswith(".gone")]
    # what the store keeps is untouched: a later job materialises it again from there
    datasets.materialise(oldest.name, str(store), str(oldest))
    assert (oldest / "data.bin").stat().st_size == MiB


def test_under_the_limit_nothing_goes_and_in_use_it_stays_over(tmp_path: Path) -> None:
    store, cache = tmp_path / "store", tmp_path / "cache"
    only = version(store, cache, "e", used_ago=3600)
    assert datasets.collect(str(cache), 100 * MiB) == ""
    holder = os.open(cache / f".{only.name}.lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_SH)
    try:
        said = datasets.collect(str(cache), 1)
    finally:
        os.close(holder)
    assert only.exists()
    assert "none unused" in said and "still over: the rest is in use" in said


def test_a_job_holds_its_versions_and_touches_them(tmp_path: Path) -> None:
    store, cache = tmp_path / "store", tmp_path / "cache"
    cached = version(store, cache, "f", used_ago=3600)
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    problem, held = datasets.ensure([spec(cached, store)], str(attempt), lambda: False)
    try:
        assert problem is None
        assert time.time() - lru.used_at(str(cache / f".{cached.name}.lock")) < 60
        _used(cached, 3600)  # even when its use is long ago, the job holds it
        said = datasets.collect(str(cache), 1)
        assert cached.exists() and "none unused" in said
    finally:
        for fd in held:
            os.close(fd)
    datasets.collect(str(cache), 1)  # the job ended: it may go
    assert not cached.exists()


def test_materialising_past_the_limit_collects_the_least_recently_used(tmp_path: Path) -> None:
    store, cache = tmp_path / "store", tmp_path / "cache"
    old = version(store, cache, "g", used_ago=7200, megabytes=2)
    kept = version(store, cache, "h", used_ago=3600, megabytes=2)
    data = b"i" * (2 * MiB)
    sha = _keep(store, data)
    manifest = _keep(store, manifest_bytes([ManifestFile("x", len(data), 0o644, sha)]))
    new = cache / manifest
    attempt = tmp_path / "attempt"
    attempt.mkdir()

    class Log:
        notes: list[str] = []

        def note(self, text: str) -> None:
            self.notes.append(text)

    log = Log()
    problem, held = datasets.ensure(
        [spec(new, store, limit=5 * MiB)], str(attempt), lambda: False, log
    )
    for fd in held:
        os.close(fd)
    assert problem is None and new.is_dir()
    assert not old.exists() and kept.exists()
    assert any(old.name[:12] in note for note in log.notes), log.notes


def test_a_version_being_removed_is_made_again_by_the_next_job(tmp_path: Path) -> None:
    """A collection renames a version away before removing it: a directory at a version's
    name is always whole, and one renamed away half removed is cleared the next time."""
    store, cache = tmp_path / "store", tmp_path / "cache"
    gone = version(store, cache, "j", used_ago=3600)
    (cache / f".{gone.name}.gone").mkdir()  # left by a collection that died
    datasets.collect(str(cache), 1)
    assert not gone.exists() and not (cache / f".{gone.name}.gone").exists()
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    problem, held = datasets.ensure([spec(gone, store)], str(attempt), lambda: False)
    for fd in held:
        os.close(fd)
    assert problem is None and (gone / "data.bin").stat().st_size == MiB
