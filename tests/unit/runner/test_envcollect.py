"""A node keeps its environments under the admin's limit: past it, the least recently used
one that no job uses (nor used in the last minute) is removed first, then uv's download cache
is cleared; an environment in use is never removed."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from gpupool.runner.envbuild import MARKER, collect, usage

MiB = 2**20


def environment(root: Path, name: str, used_ago: float, megabytes: int = 1) -> Path:
    path = root / name
    (path / "lib").mkdir(parents=True)
    (path / "lib" / "data.bin").write_bytes(os.urandom(megabytes * MiB))
    (path / MARKER).write_text(json.dumps({"id": f"sha256:{name}"}))
    lock = root / ".locks" / name
    lock.parent.mkdir(exist_ok=True)
    lock.touch()
    used_at = time.time() - used_ago
    os.utime(lock, (used_at, used_at))
    return path


def test_the_least_recently_used_unused_environments_go_first(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    oldest = environment(root, "a" * 64, used_ago=3600)
    in_use = environment(root, "b" * 64, used_ago=7200)  # older still, but a job holds it
    recent = environment(root, "c" * 64, used_ago=10)  # used a moment ago
    newer = environment(root, "d" * 64, used_ago=600)
    holder = os.open(root / ".locks" / ("b" * 64), os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_SH)  # its job's runner
    try:
        said = collect(str(root), usage(str(root)) - MiB // 2)
    finally:
        os.close(holder)
    assert not oldest.exists()
    assert in_use.exists() and recent.exists() and newer.exists()
    assert said.startswith("environments on this node past")
    assert "removed 1 unused environment(s) (aaaaaaaaaaaa)" in said


def test_under_the_limit_nothing_is_touched_and_past_it_the_cache_is_cleared(
    tmp_path: Path,
) -> None:
    root = tmp_path / "envs"
    kept = environment(root, "e" * 64, used_ago=5)
    cache = root / ".uv-cache"
    cache.mkdir()
    (cache / "wheel.bin").write_bytes(os.urandom(2 * MiB))
    assert collect(str(root), 100 * MiB) == ""
    said = collect(str(root), 2 * MiB)  # the environment is recent: only the cache can go
    assert kept.exists() and cache.is_dir() and not (cache / "wheel.bin").exists()
    assert "cleared uv's download cache" in said
