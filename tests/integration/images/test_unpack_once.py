"""An image's unpack on a node, with the real umoci: starts that need the image at once
unpack it once (a lock per digest) and share the tree; a node that cannot see the image
store says where it looked and what a pool needs."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpupool.executors import images
from tests.support.images import ImageConfig, Layout, Member, layer


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, str]:
    made = Layout(tmp_path / "store" / "oci" / "one")
    members = [Member("etc", "dir", mode=0o755), Member("etc/marker", data=b"unpacked\n")]
    return made.path, made.add(images.TAG, [layer(members)], ImageConfig(workdir="/srv"))


def test_starts_at_once_unpack_the_image_once_and_share_its_tree(
    layout: tuple[Path, str], tmp_path: Path
) -> None:
    umoci = shutil.which("umoci")
    if umoci is None:
        pytest.skip("umoci is not installed (scripts/install-system-deps.sh test installs it)")
    path, digest = layout
    calls = tmp_path / "calls"
    counted = tmp_path / "umoci"  # umoci, each run counted, slow enough for starts to meet
    counted.write_text(f'#!/bin/sh\necho run >> {calls}\nsleep 0.5\nexec {umoci} "$@"\n')
    counted.chmod(0o755)
    cache = tmp_path / "roots"

    with ThreadPoolExecutor(4) as starts:
        found = list(
            starts.map(lambda _: images.unpack_once(path, digest, cache, str(counted)), range(4))
        )

    assert calls.read_text().splitlines() == ["run"]
    root = cache / digest.removeprefix("sha256:") / images.ROOTFS
    assert {unpacked.root for unpacked in found} == {root}
    assert {unpacked.config.workdir for unpacked in found} == {"/srv"}
    assert (root / "etc" / "marker").read_text() == "unpacked\n"
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [root.parent.name]


def test_a_node_that_cannot_see_the_image_store_says_so(
    layout: tuple[Path, str], tmp_path: Path
) -> None:
    _, digest = layout
    elsewhere = tmp_path / "not-mounted" / "oci" / "one"
    with pytest.raises(images.ImageError) as refused:
        images.unpack_once(elsewhere, digest, tmp_path / "roots")
    said = refused.value.message
    assert str(elsewhere.parent) in said and "GPUPOOL_IMAGES_STORE" in said
