"""Datasets and volumes: the rules and the read models (no I/O here).

A dataset is a named list of immutable, numbered versions of a team. A version is a
*manifest*: a JSON document listing each file's ``path``, ``size``, ``mode`` and ``sha256``;
the files' bytes are *blobs*, each kept once in the dataset store under its SHA-256. The
manifest is itself a blob, so a version is named by the hash of its manifest, and two
versions that share a file share its blob: an upload sends only the blobs the store lacks
for the team.

A job names the datasets it reads as ``NAME[:VERSION][:/MOUNT]`` (``JobSpec.datasets``);
the version is resolved at submit (the latest when none is given) and recorded on the job,
so the job sees exactly that version, read-only, at ``/datasets/NAME`` unless it gives a
mount path.

A volume is a team's mutable directory, kept on the node and mounted read-write
(``NAME:/MOUNT``); its bytes count against the team's storage quota.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from gpupool.domain.views import View

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
NAME_RULE = (
    "a dataset's or a volume's name is 1 to 100 letters, digits, '.', '_' or '-', starting "
    "with a letter or a digit (no ':', which separates a version: NAME:3)"
)
SHA256_PATTERN = r"^[0-9a-f]{64}$"
MANIFEST_VERSION = 1
MOUNT_ROOT = "/datasets"  # a dataset is mounted at /datasets/NAME unless the job says where
MAX_PATH = 4096
MAX_COMPONENT = 255
MAX_MODE = 0o777
# where a job's datasets and volumes may not be mounted: the sandbox's own places
RESERVED_MOUNTS = ("/proc", "/dev", "/sys", "/usr", "/bin", "/sbin", "/lib", "/etc", "/tmp")
_NAME = re.compile(NAME_PATTERN)
_SHA256 = re.compile(SHA256_PATTERN)


def is_dataset_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.match(value) is not None


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and _SHA256.match(value) is not None


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

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def blobs(self) -> dict[str, int]:
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


# -- references ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetRef:
    """A job's use of a dataset: ``name``, ``version`` (None until resolved: the latest) and
    where it is mounted in the job's sandbox."""

    name: str
    version: int | None
    mount: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "mount": self.mount}


def parse_dataset_ref(value: str) -> DatasetRef:
    """``NAME``, ``NAME:VERSION``, ``NAME:/MOUNT`` or ``NAME:VERSION:/MOUNT``; ValueError
    saying what is wrong."""
    name, _, rest = value.partition(":")
    if not is_dataset_name(name):
        raise ValueError(f"'{name}' is not a dataset's name: {NAME_RULE}")
    version: int | None = None
    mount = ""
    if rest.startswith("/"):
        mount = rest
    elif rest:
        number, _, mount = rest.partition(":")
        if number != "latest":
            if not number.isdigit() or int(number) < 1 or len(number) > 12:
                raise ValueError(
                    f"'{number}' is not a version: versions are numbered 1, 2, 3 ... (or 'latest')"
                )
            version = int(number)
        if _ and not mount:
            raise ValueError("give a mount path after the version: NAME:3:/data")
    return DatasetRef(name, version, check_mount(mount) if mount else f"{MOUNT_ROOT}/{name}")


def check_mount(mount: str) -> str:
    """``mount``, normalised, if a dataset or a volume may be mounted there (an absolute path,
    no '..', not the sandbox's system places); ValueError otherwise."""
    if not mount.startswith("/") or "\0" in mount:
        raise ValueError(f"'{mount[:200]}' is not a mount path: give an absolute path, /data")
    parts = mount.split("/")
    if ".." in parts or "." in parts:
        raise ValueError(f"a mount path cannot hold '.' or '..': {mount[:200]}")
    normal = posixpath.normpath(mount)
    if normal == "/" or len(normal) > 1024:
        raise ValueError(f"'{mount[:200]}' cannot be a mount path: give a directory such as /data")
    for reserved in RESERVED_MOUNTS:
        if normal == reserved or normal.startswith(reserved + "/"):
            raise ValueError(f"{reserved} belongs to the sandbox: mount elsewhere, e.g. /data")
    return normal


def env_name(name: str) -> str:
    """The environment variable that tells a job where the dataset ``name`` is:
    ``GPUPOOL_DATASET_<NAME>``, upper-cased, every other character than letters and digits
    as '_'."""
    return "GPUPOOL_DATASET_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


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
