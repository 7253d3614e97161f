"""Uploading a directory as a dataset version, sending only what the server lacks.

``scan`` walks the directory and hashes each regular file (SHA-256) into a manifest: its
path relative to the directory, its size and its mode (0755 for a file any execute bit is
set on, else 0644). Symbolic links are followed to the regular files they name (a dataset
holds copies); links to directories, and anything else that is not a regular file, are left
out and counted. ``send`` uploads the manifest, asks which blobs the team lacks, uploads
those only (each checked against its SHA-256 by the server), and commits the version;
``upload`` does the same but the commit (a job file's Dataset is made with the file).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.client.api import Client
from gpupool.domain.datasets import ManifestFile, manifest_bytes

CHUNK = 1 << 20
PARALLEL = 8  # blobs uploaded at once (each on its own connection)


class ScanError(Exception):
    """The directory cannot be sent as it is; ``code`` is a stable name, as the server's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass
class Scan:
    """A directory's files as a manifest, and where each blob's bytes are on this machine."""

    files: list[ManifestFile] = field(default_factory=list)
    sources: dict[str, Path] = field(default_factory=dict)  # sha256 -> a file with its bytes
    skipped: list[str] = field(default_factory=list)  # not regular files: left out

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Sent:
    """What ``send`` did: the version made, the blobs it uploaded, and the bytes it sent
    (the blobs and the gzipped manifest) of the version's ``total_bytes``."""

    version: dict[str, Any]
    uploaded_blobs: int
    uploaded_bytes: int
    total_bytes: int


def scan(root: Path) -> Scan:
    """The files below ``root`` (a directory, or one file), hashed; ScanError when there is
    nothing to send."""
    root = root.expanduser()
    if root.is_file():
        found = Scan()
        _add(found, root.name, root)
        return found
    if not root.is_dir():
        raise ScanError("not_a_directory", f"{root} is not a directory or a file: give one")
    found = Scan()
    for directory, names, files in os.walk(root, followlinks=False):
        names.sort()
        base = Path(directory)
        for name in names[:]:
            if (base / name).is_symlink():
                names.remove(name)
                found.skipped.append(str((base / name).relative_to(root)))
        for name in sorted(files):
            path = base / name
            _add(found, path.relative_to(root).as_posix(), path)
    if not found.files:
        raise ScanError("empty_dataset", f"{root} holds no regular file: nothing to send")
    return found


@dataclass(frozen=True)
class Uploaded:
    """What ``upload`` did: the manifest (hex) the server holds for the team, the version's
    files and bytes, the blobs the team lacked and their bytes, and the bytes sent (all of
    them but the manifest's unless it was a dry run: then the manifest's only)."""

    manifest: str
    file_count: int
    total_bytes: int
    missing_blobs: int
    missing_bytes: int
    sent_bytes: int


def upload(
    client: Client,
    name: str,
    found: Scan,
    team: str | None = None,
    dry_run: bool = False,
    connect: Callable[[], Client] | None = None,
    parallel: int = PARALLEL,
) -> Uploaded:
    """Upload ``found``'s manifest and the blobs the team lacks, not committing a version
    (``gpupool apply -f`` sends the manifest in its file, made in the file's transaction).
    ``dry_run``: the manifest only (a few bytes a file), and the blobs that would be sent
    counted, not sent."""
    manifest = manifest_bytes(found.files)
    digest = hashlib.sha256(manifest).hexdigest()
    packed = gzip.compress(manifest, compresslevel=6, mtime=0)
    client.upload_blob(digest, io.BytesIO(packed), len(packed), team, gzipped=True)
    plan = client.plan_dataset_upload(name, digest, team)
    missing: list[str] = plan["missing"]
    sent = len(packed)
    if not dry_run:
        sent += _upload_blobs(client, found, missing, team, None, plan, connect, parallel)
    return Uploaded(
        digest, len(found.files), found.size_bytes, len(missing), plan["missing_bytes"], sent
    )


def send(
    client: Client,
    name: str,
    found: Scan,
    team: str | None = None,
    description: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    connect: Callable[[], Client] | None = None,
    parallel: int = PARALLEL,
) -> Sent:
    """Upload ``found`` as the next version of ``name``: the manifest, then the blobs the
    team lacks, then the commit. ``progress(bytes sent, bytes to send)`` after each blob.
    ``connect``: a new client (a connection) for each of ``parallel`` uploads at once (the
    server syncs each blob to its disk before it answers: one at a time, small files wait
    on the disk); without it, ``client`` sends them one after the other."""
    manifest = manifest_bytes(found.files)
    digest = hashlib.sha256(manifest).hexdigest()
    packed = gzip.compress(manifest, compresslevel=6, mtime=0)  # about half: hashes and paths
    client.upload_blob(digest, io.BytesIO(packed), len(packed), team, gzipped=True)
    plan = client.plan_dataset_upload(name, digest, team)
    missing: list[str] = plan["missing"]
    sent = _upload_blobs(client, found, missing, team, progress, plan, connect, parallel)
    version = client.create_dataset_version(
        name, manifest=digest, team=team, description=description
    )
    return Sent(version, len(missing), sent + len(packed), found.size_bytes)


def _upload_blobs(
    client: Client,
    found: Scan,
    missing: list[str],
    team: str | None,
    progress: Callable[[int, int], None] | None,
    plan: dict[str, Any],
    connect: Callable[[], Client] | None,
    parallel: int,
) -> int:
    """Upload the ``missing`` blobs (in parallel over ``connect``'s clients, when given);
    the bytes sent."""
    done = [0]
    lock = threading.Lock()

    def upload(each: Client, sha: str) -> None:
        with found.sources[sha].open("rb") as source:
            size = os.fstat(source.fileno()).st_size
            each.upload_blob(sha, source, size, team)
        with lock:
            done[0] += size
            if progress is not None:
                progress(done[0], plan["missing_bytes"])

    if connect is None or parallel < 2 or len(missing) < 2:
        for sha in missing:
            upload(client, sha)
    else:
        _in_parallel(connect, min(parallel, len(missing)), missing, upload)
    return done[0]


def _in_parallel(
    connect: Callable[[], Client],
    workers: int,
    shas: list[str],
    upload: Callable[[Client, str], None],
) -> None:
    """``upload`` each of ``shas``, ``workers`` at once, each worker over its own client."""
    pending = iter(shas)
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        each = connect()
        try:
            while not failures:
                with lock:
                    sha = next(pending, None)
                if sha is None:
                    return
                upload(each, sha)
        except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
            failures.append(error)
        finally:
            each.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _add(found: Scan, relative: str, path: Path) -> None:
    try:
        st = path.stat()  # follows a link to the file it names
    except OSError:
        found.skipped.append(relative)
        return
    if not stat.S_ISREG(st.st_mode):
        found.skipped.append(relative)
        return
    digest, size = _hash(path)
    mode = 0o755 if st.st_mode & 0o111 else 0o644
    found.files.append(ManifestFile(relative, size, mode, digest))
    found.sources.setdefault(digest, path)


def _hash(path: Path) -> tuple[str, int]:
    sha, size = hashlib.sha256(), 0
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), size
