"""What a node keeps of what jobs fetch before they start, for placement that prefers it.

Three caches, each one directory per thing, named by its digest:

* environments (``runner.envbuild``): ``<envs>/<hex>``, built when its ``.gpupool-env.json``
  is there; that marker says how many bytes the build took;
* dataset versions (``runner.datasets``): ``<dataset cache>/<manifest hex>``, whole once
  renamed into place (a ``.part`` or dot-name is one being made);
* images (``images.unpack_once``): ``<image cache>/<hex>``, whole once its ``image.json``
  is there.

A scan lists the directories only (it never walks a tree): a few hundred entries, once every
few seconds. Keys are the ones ``scheduler.types.Want`` uses: ``env:sha256:<hex>``,
``dataset:<hex>``, ``image:sha256:<hex>``; bytes are 0 where the scan cannot tell cheaply
(the server knows a dataset version's and an image's size; it is the job's ``Want`` that
carries the size placement weighs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpupool.domain.locality import dataset_key, env_key, image_key
from gpupool.executors.images import CONFIG as IMAGE_CONFIG
from gpupool.runner.envbuild import MARKER as ENV_MARKER


def scan(envs: Path | None, datasets: Path | None, images: Path | None) -> dict[str, int]:
    """What the three caches of a node hold now (key -> bytes); a cache that does not exist
    holds nothing."""
    held: dict[str, int] = {}
    for name, path in _entries(envs):
        marker = _json(path / ENV_MARKER)
        if marker is not None:
            held[env_key(str(marker.get("id") or f"sha256:{name}"))] = _int(marker.get("bytes"))
    for name, path in _entries(datasets):
        if not name.endswith(".part") and path.is_dir():
            held[dataset_key(name)] = 0
    for name, path in _entries(images):
        if (path / IMAGE_CONFIG).is_file():
            held[image_key(f"sha256:{name}")] = 0
    return held


def _entries(root: Path | None) -> list[tuple[str, Path]]:
    if root is None:
        return []
    try:
        names = os.listdir(root)
    except OSError:  # not made yet (nothing fetched on this node), or gone
        return []
    return [(name, root / name) for name in names if not name.startswith(".")]


def _json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _int(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
