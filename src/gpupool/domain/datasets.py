"""Datasets and volumes: the rules and the read models (no I/O here).

A dataset is a named list of immutable, numbered versions of a team. A version is a
*manifest*: a JSON document listing each file's ``path``, ``size``, ``mode`` and ``sha256``;
the files' bytes are *blobs*, each kept once in the dataset store under its SHA-256. The
manifest is itself a blob, so a version is named by the hash of its manifest, and two
versions that share a file share its blob: an upload sends only the blobs the store lacks
for the team.

A job names the datasets it reads as ``NAME[:VERSION][:/MOUNT]`` (``JobSpec.datasets``,
``gpupool.domain.datasetrefs``); the version is resolved at submit (the latest when none is
given) and recorded on the job, so the job sees exactly that version, read-only, at
``/datasets/NAME`` unless it gives a mount path.

A volume is a team's mutable directory, kept on the node and mounted read-write
(``NAME:/MOUNT``); its bytes count against the team's storage quota.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import Field

from gpupool.domain.datasetrefs import is_sha256
from gpupool.domain.views import View

MANIFEST_VERSION = 1
MAX_PATH = 4096
MAX_COMPONENT = 255
MAX_MODE = 0o777


# -- manifests ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestFile:
    """One file of a version: where it lies in the version, its size, its permission bits
    and the SHA-256 (hex) of its bytes, which names its blob."""

    path: str
    size: int
    mode: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "mode": self.mode, "sha256": self.sha256}


@dataclass(frozen=True)
class Manifest:
    """A version's files, sorted by path; ``size_bytes`` their bytes, ``blobs`` the distinct
    blobs they need (with each one's size)."""

    files: tuple[ManifestFile, ...]

    @cached_property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @cached_property
    def blobs(self) -> dict[str, int]:
        # worked out once: a plan looks up each of 100,000 files' blobs in it
        return {f.sha256: f.size for f in self.files}


class ManifestError(ValueError):
    """What is wrong with a manifest, naming the file (``path``) when one is at fault."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ManifestTooLarge(ValueError):
    """A manifest over the limits: ``files`` and ``size_bytes`` are what it holds."""

    def __init__(self, files: int, size_bytes: int) -> None:
        super().__init__(f"{files} files, {size_bytes} bytes")
        self.files, self.size_bytes = files, size_bytes


def manifest_bytes(files: list[ManifestFile]) -> bytes:
    """The manifest of ``files`` as the bytes a client uploads (sorted, compact JSON): the
    same files always give the same bytes, so the same version the same hash."""
    ordered = sorted(files, key=lambda f: f.path)
    body = {"version": MANIFEST_VERSION, "files": [f.to_json() for f in ordered]}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def parse_manifest(data: bytes, max_files: int, max_bytes: int) -> Manifest:
    """The manifest in ``data``, checked: ManifestError for a malformed one or a hostile path
    (absolute, with '..', '.' or an empty part, twice, or below another file), ManifestTooLarge
    past ``max_files`` or ``max_bytes``."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise ManifestError(f"the manifest is not JSON: {error}") from None
    if not isinstance(raw, dict) or raw.get("version") != MANIFEST_VERSION:
        raise ManifestError(
            f'a manifest is an object {{"version": {MANIFEST_VERSION}, "files": [...]}}'
        )
    entries = raw.get("files")
    if not isinstance(entries, list):
        raise ManifestError('a manifest\'s "files" is a list of {path, size, mode, sha256}')
    if len(entries) > max_files:
        raise ManifestTooLarge(len(entries), _total(entries))
    files = [_file(entry) for entry in entries]
    total = sum(f.size for f in files)
    if total > max_bytes:
        raise ManifestTooLarge(len(files), total)
    _check_tree(files)
    return Manifest(tuple(sorted(files, key=lambda f: f.path)))


def check_path(path: object) -> str:
    """``path`` if it is a relative path inside a version (ManifestError otherwise)."""
    if not isinstance(path, str) or not path:
        raise ManifestError("a file's path is a non-empty string")
    shown = path[:200]
    if "\0" in path:
        raise ManifestError("a file's path cannot hold a NUL character", shown)
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise ManifestError(f"a file's path is at most {MAX_PATH} bytes", shown)
    if path.startswith("/"):
        raise ManifestError("a file's path is relative to the version's root, not absolute", shown)
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise ManifestError(
                "a file's path has no empty part, no '.' and no '..' (it stays inside the version)",
                shown,
            )
        if len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT:
            raise ManifestError(f"a name in a file's path is at most {MAX_COMPONENT} bytes", shown)
    return path


def _file(entry: object) -> ManifestFile:
    if not isinstance(entry, dict):
        raise ManifestError("each file of a manifest is an object {path, size, mode, sha256}")
    path = check_path(entry.get("path"))
    size, mode, sha = entry.get("size"), entry.get("mode"), entry.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError("a file's size is a whole number of bytes, 0 or more", path)
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= MAX_MODE:
        raise ManifestError(
            "a file's mode is its permission bits, 0 to 0o777 (no setuid, setgid or sticky "
            "bit: a dataset holds regular files only)",
            path,
        )
    if not is_sha256(sha):
        raise ManifestError("a file's sha256 is 64 lower-case hex digits", path)
    return ManifestFile(path, size, mode, str(sha))


def _check_tree(files: list[ManifestFile]) -> None:
    """No path twice, and no file below another file (its parent would be a directory too)."""
    paths: set[str] = set()
    for f in files:
        if f.path in paths:
            raise ManifestError("a manifest names each file once", f.path)
        paths.add(f.path)
    for f in files:
        parent = posixpath.dirname(f.path)
        while parent:
            if parent in paths:
                raise ManifestError(f"a file cannot lie below the file {parent[:200]}", f.path)
            parent = posixpath.dirname(parent)


def _total(entries: list[Any]) -> int:
    return sum(e["size"] for e in entries if isinstance(e, dict) and isinstance(e.get("size"), int))


def blob_relpath(sha256: str) -> str:
    """Where the blob ``sha256`` (hex) lies below the dataset store: the server writes it
    there, nodes read it there."""
    return f"blobs/{sha256[:2]}/{sha256}"


# -- read models -----------------------------------------------------------------------------


class DatasetFileView(View):
    """A file of a version."""

    path: str
    size: int
    mode: int
    sha256: str


class DatasetVersionSummary(View):
    """A version as a dataset's list of versions shows it."""

    version: int
    manifest: str = Field(description="sha256:<hex> of the version's manifest")
    file_count: int
    size_bytes: int
    blob_count: int = Field(description="the distinct blobs its files need")
    description: str | None = None
    source_job_id: int | None = Field(default=None, description="the job it was made from")
    created_at: float
    created_by: str


class DatasetVersionView(DatasetVersionSummary):
    """One version with its files (``files`` empty when not asked for)."""

    name: str
    team: str
    files: list[DatasetFileView] = []


class DatasetView(View):
    """A dataset of a team: its latest version and how many it has."""

    name: str
    team: str
    latest_version: int | None
    version_count: int
    size_bytes: int = Field(description="the bytes of its latest version's files")
    created_at: float
    updated_at: float


class DatasetDetailView(DatasetView):
    """A dataset with its versions, newest first."""

    versions: list[DatasetVersionSummary]


class UploadPlanView(View):
    """What a client must send before a manifest can become a version: the blobs the store
    lacks for the team, and their bytes."""

    manifest: str
    file_count: int
    size_bytes: int
    missing: list[str] = Field(description="the SHA-256 (hex) of each blob to upload")
    missing_bytes: int


class BlobView(View):
    """A blob received and kept."""

    sha256: str
    size: int


class VolumeView(View):
    """A team's volume: a mutable directory on the node, mounted read-write."""

    name: str
    team: str
    size_limit_bytes: int | None = Field(description="its size limit (None: the team's quota)")
    used_bytes: int | None = Field(description="its bytes at the last storage scan")
    created_at: float
    created_by: str
