"""What a node's caches hold, as placement is told (``executors.holdings.scan``), from
directories laid out as the runner and the image unpack leave them."""

from __future__ import annotations

import json
from pathlib import Path

from gpupool.domain.locality import dataset_key, env_key, image_key
from gpupool.executors.holdings import scan
from gpupool.executors.images import CONFIG
from gpupool.runner.envbuild import MARKER


def test_only_whole_things_are_held(tmp_path: Path) -> None:
    envs, datasets, images = tmp_path / "envs", tmp_path / "dataset-cache", tmp_path / "roots"
    built, building = "a1" * 32, "b2" * 32
    (envs / built).mkdir(parents=True)
    (envs / built / MARKER).write_text(json.dumps({"id": f"sha256:{built}", "bytes": 4096}))
    (envs / building / "bin").mkdir(parents=True)  # no marker yet: a build under way
    (envs / ".locks").mkdir()
    (envs / ".uv-cache").mkdir()
    whole, partial = "c3" * 32, "d4" * 32
    (datasets / whole / "train").mkdir(parents=True)
    (datasets / f"{partial}.part").mkdir()
    (datasets / f".{whole}.lock").touch()
    unpacked, unpacking = "e5" * 32, "f6" * 32
    (images / unpacked / "rootfs").mkdir(parents=True)
    (images / unpacked / CONFIG).write_text("{}")
    (images / f".{unpacking[:12]}-x" / "bundle").mkdir(parents=True)
    assert scan(envs, datasets, images) == {
        env_key(f"sha256:{built}"): 4096,
        dataset_key(whole): 0,
        image_key(f"sha256:{unpacked}"): 0,
    }


def test_caches_not_made_yet_hold_nothing(tmp_path: Path) -> None:
    assert scan(tmp_path / "none", tmp_path / "none", None) == {}
    (tmp_path / "envs" / ("a1" * 32)).mkdir(parents=True)
    (tmp_path / "envs" / ("a1" * 32) / MARKER).write_text("not json")
    assert scan(tmp_path / "envs", None, None) == {}
