"""A node's cache of dataset versions: each materialised once, read-only, shared by the jobs
that read it.

A version is the tree its manifest lists, made below the node's cache at
``<cache>/<manifest hex>``: each file a hard link to its blob in the dataset store (the same
file system: no byte copied), or a copy where a link cannot be made (another file system, a
store on NFS) or where the file is executable (a blob is kept 0444, and its links share its
mode). Files are 0444 (0555 executable), directories 0555. The tree is built in a private
``.part`` directory and renamed into place when whole, under a lock per version, so that
jobs starting at once on the node build it once and none ever sees half of it; a part left
by a crash is removed by the next build.

The runner shows the version read-only at the job's mount path (``SandboxPolicy.mounts``);
what the job sees is exactly the manifest recorded at submit.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from pathlib import Path
from typing import Any

from gpupool.domain.datasets import Manifest, blob_relpath, parse_manifest

MAX_MANIFEST_BYTES = 1 << 30  # the server checked the manifest's limits; this guards memory
MAX_FILES = 100_000_000


class DatasetMissing(Exception):
    """A blob or the manifest of a version is not in the dataset store."""


def materialise(use: dict[str, Any], cache: Path) -> Path:
    """The version ``use`` names (``TaskSpec.datasets``'s item), made in ``cache`` unless it
    is there already; its directory. DatasetMissing when the store lacks part of it; OSError
    for what the disk says."""
    manifest = str(use["manifest"])
    final = cache / manifest
    if final.is_dir():
        return final
    cache.mkdir(parents=True, exist_ok=True, mode=0o755)
    with _locked(cache / f".{manifest}.lock"):
        if final.is_dir():  # another job of this node made it while this one waited
            return final
        store = Path(str(use["store"]))
        part = cache / f".{manifest}.part"
        remove_tree(part)
        _build(store, _manifest(store, manifest), part)
        os.rename(part, final)
    return final


def remove_tree(path: Path) -> None:
    """Remove a (read-only) tree, as far as it exists."""
    if not path.exists():
        return
    for directory, _names, _files in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def _manifest(store: Path, sha256: str) -> Manifest:
    path = store / blob_relpath(sha256)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DatasetMissing(f"the manifest {sha256} is not in the dataset store {store}") from None
    return parse_manifest(data[:MAX_MANIFEST_BYTES], MAX_FILES, 1 << 62)


def _build(store: Path, manifest: Manifest, root: Path) -> None:
    root.mkdir(mode=0o755)
    made = {root}
    for entry in manifest.files:
        target = root / entry.path
        parent = target.parent
        if parent not in made:
            parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            made.update([parent, *parent.parents])
        source = store / blob_relpath(entry.sha256)
        if not source.is_file():
            raise DatasetMissing(f"the blob {entry.sha256} of {entry.path} is not in {store}")
        executable = bool(entry.mode & 0o111)
        if executable or not _link(source, target):
            shutil.copyfile(source, target)
            os.chmod(target, 0o555 if executable else 0o444)
    for directory, _names, _files in os.walk(root, topdown=False):
        os.chmod(directory, 0o555)


def _link(source: Path, target: Path) -> bool:
    """A hard link to the blob; False where the file system refuses one (EXDEV: another
    file system; EPERM: a store whose files this account may not link)."""
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            return False
        raise
    return True


@contextlib.contextmanager
def _locked(path: Path):  # noqa: ANN202 - a context manager
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
