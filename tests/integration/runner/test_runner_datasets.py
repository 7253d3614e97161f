"""The runner materialises a job's dataset versions in its node's cache before the job starts
and holds them (a shared lock on each) until the job ends, so that no collection of the cache
past its limit removes a version under a running job; once it ended, the version may go."""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from runner_harness import RunnerHarness, wait_for

from gpupool.domain.datasets import ManifestFile, blob_relpath, manifest_bytes
from gpupool.runner import datasets


def _keep(store: Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    blob = store / blob_relpath(sha)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    blob.chmod(0o444)
    return sha


def test_its_job_holds_its_version_so_no_collection_removes_it(harness: RunnerHarness) -> None:
    store, cache = harness.root / "store", harness.root / "cache"
    data = b"rows\n" * 1000
    manifest = _keep(
        store, manifest_bytes([ManifestFile("t.csv", len(data), 0o644, _keep(store, data))])
    )
    path = cache / manifest
    use = {"name": "t", "version": 1, "manifest": manifest, "store": str(store)}
    release = harness.work / "release"
    wait = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"
    harness.write_spec(
        ["python", "-c", wait],
        datasets=[{**use, "path": str(path), "cache_max_bytes": 1}],
        workdir=str(harness.work),
    )
    proc = harness.spawn()
    wait_for(lambda: harness.dir.joinpath("state.json").exists(), 60, "the job to start")
    assert (path / "t.csv").read_bytes() == data
    said = datasets.collect(str(cache), 1, now=2**40)  # its last use long past, if it counted
    assert path.is_dir() and "none unused" in said, "a collection took a running job's version"
    probe = os.open(cache / f".{manifest}.lock", os.O_RDWR)
    try:
        release.touch()
        assert harness.wait_for_exit(proc) == 0
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the job ended
    finally:
        os.close(probe)
    assert harness.state()["exit_code"] == 0, harness.log()
    datasets.collect(str(cache), 1, now=2**40)
    assert not path.exists()
