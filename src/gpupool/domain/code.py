"""Code snapshots: a job's working directory sent with it, named by its content's hash.

A snapshot is a gzip-compressed tar archive of regular files and directories only, with
relative paths, modes 0644 or 0755, no owners and the files' modification times; its name
(a ``ref``) is ``sha256:<hex>`` of the archive's bytes. This module holds the format's rules
and names. It does no I/O: the client packs (``gpupool.client.code``); the server checks an
upload and each node unpacks it (``gpupool.executors.code``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALGORITHM = "sha256"
REF_PATTERN = r"^sha256:[0-9a-f]{64}$"
REF_EXAMPLE = "sha256:" + "0" * 64
FILE_MODE = 0o644
EXECUTABLE_MODE = 0o755
DIRECTORY_MODE = 0o755
MAX_PATH_BYTES = 4096  # PATH_MAX: a member named longer could not be made on the node
MAX_DEPTH = 256  # directories in a member's path

_REF = re.compile(REF_PATTERN)
MiB, GiB = 1024**2, 1024**3


@dataclass(frozen=True)
class CodeLimits:
    """What a server takes of one snapshot (its settings ``max_code_*``): the archive's
    bytes, the bytes of the files it unpacks to, and its entries (files and directories)."""

    archive_bytes: int = 100 * MiB
    unpacked_bytes: int = 1 * GiB
    entries: int = 100_000


@dataclass(frozen=True)
class CodeSummary:
    """What an archive holds: its files (directories not counted) and their bytes."""

    files: int
    unpacked_bytes: int


def is_ref(value: object) -> bool:
    return isinstance(value, str) and _REF.match(value) is not None


def ref_of(hex_digest: str) -> str:
    """``sha256:<hex>`` of a SHA-256 digest in hex."""
    return f"{ALGORITHM}:{hex_digest}"


def digest_of(ref: str) -> str:
    """The hex digest of a ref; ValueError if it is not one."""
    if not is_ref(ref):
        raise ValueError(
            f"'{ref}' is not a code snapshot's name: sha256: and 64 hex digits (lower case)"
        )
    return ref.split(":", 1)[1]


def member_path(name: str) -> str:
    """The relative path an archive member unpacks to ('' for the root itself), with the
    './' that tar writes dropped; ValueError saying what is wrong with it."""
    if name.startswith("/"):
        raise ValueError("an absolute path")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise ValueError(f"a path longer than {MAX_PATH_BYTES} bytes")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("a '..' in its path")
    if len(parts) > MAX_DEPTH:
        raise ValueError(f"more than {MAX_DEPTH} directories deep")
    return "/".join(parts)


def file_mode(mode: int) -> int:
    """0755 for a file anyone may execute (a script), else 0644: owners and odd bits
    (setuid, group-writable) never travel with the code."""
    return EXECUTABLE_MODE if mode & 0o111 else FILE_MODE
