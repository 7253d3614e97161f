"""A job's outputs packed as a model version's archive, on the node that holds them.

``pack`` writes the files below a path of a job's outputs directory as a gzip-compressed tar
archive in the format of code snapshots (``gpupool.domain.code``: regular files and
directories with relative paths, modes 0644 or 0755, no owners), so any node unpacks a model
version with ``gpupool.executors.code.unpack_once``. ``index`` reads such an archive back and
lists its files with their sizes and SHA-256, checking the format on the way.

What a job left is not trusted: the path asked for must stay inside the outputs; a symbolic
link is taken (as a copy of its file) only when it leads to a regular file inside the
outputs, and refused when it leads outside, to a directory or nowhere; a hard link to a file
the job's account does not own is refused (a server running as root could read it); FIFOs,
sockets and devices are refused, not read (a FIFO would block the reader). Files are opened without
following a link, and the limits (bytes and entries) are checked before anything is copied.
The job has ended when this runs (``services.models`` refuses a running one), so nothing
changes the tree while it is read.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from gpupool.domain.code import DIRECTORY_MODE, CodeLimits, file_mode, member_path
from gpupool.domain.units import format_bytes
from gpupool.errors import BadModelPath, GpupoolError, ModelTooLarge, NoModelFiles

CHUNK = 1 << 20
# gzip without compression (stored blocks: still the code snapshots' format): weights, most
# of a model's bytes, do not compress, and deflate would set the pace. Measured on 128 MiB
# of random bytes: level 0 writes 220 MiB/s at 1.0001x the size, level 1 25 MiB/s at 1.0003x.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class InvalidFileName(BadModelPath):
    """A model version's file names are UTF-8 text (they are stored and shown): rename the
    file in the job's outputs, or register a sub directory without it (--path)."""

    code = "invalid_file_name"


# what a node agent may answer instead of an archive: the errors a user is told as they are
ERRORS: dict[str, type[GpupoolError]] = {
    error.code: error for error in (BadModelPath, InvalidFileName, NoModelFiles, ModelTooLarge)
}


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


@dataclass(frozen=True)
class PackedFile:
    """A file of a packed archive: its path in it, size and SHA-256 (hex)."""

    path: str
    size: int
    sha256: str


def pack(
    outputs: Path,
    path: str,
    limits: CodeLimits,
    into: Writable,
    skip: frozenset[str] = frozenset(),
) -> None:
    """Write the files below ``outputs/path`` (or that one file) into ``into`` as an archive.
    ``skip``: names at the top of ``outputs`` that are the platform's, not the job's.
    BadModelPath, NoModelFiles or ModelTooLarge, before anything is written."""
    base = _start(outputs, path)
    entries = list(_walk(outputs, base, skip if base == outputs.resolve() else frozenset()))
    _check(entries, limits, path)
    with (
        gzip.GzipFile(filename="", fileobj=into, mode="wb", mtime=0, compresslevel=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in entries:
            _add(tar, entry)


def index(archive: Path | BinaryIO, limits: CodeLimits) -> list[PackedFile]:
    """The files of a packed archive, by path; GpupoolError when it breaks the format."""
    found: dict[str, PackedFile | None] = {}  # path -> file (None: a directory)
    total = 0
    with _opened(archive) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
        for member in tar:
            path = _member(member, found, limits)
            if member.isdir():
                found[path] = None
                continue
            total += member.size
            if total > limits.unpacked_bytes:
                raise too_large(limits)
            found[path] = PackedFile(path, member.size, _digest(tar.extractfile(member)))
    return sorted((f for f in found.values() if f is not None), key=lambda f: f.path)


def too_large(limits: CodeLimits) -> ModelTooLarge:
    return ModelTooLarge(
        f"the files are more than this server keeps in one model version "
        f"({format_bytes(limits.unpacked_bytes)} in {limits.entries:,} files and directories:"
        " GPUPOOL_MAX_MODEL_BYTES, GPUPOOL_MAX_MODEL_FILES): register a sub directory with "
        "--path, or ask an admin to raise the limit",
        max_bytes=limits.unpacked_bytes,
        max_files=limits.entries,
    )


def error_from_json(data: dict[str, object]) -> GpupoolError:
    """An error a node agent answered (``{"code", "message", "details"}``) as ours."""
    kind = ERRORS.get(str(data.get("code")), GpupoolError)
    details = data.get("details") if isinstance(data.get("details"), dict) else {}
    return kind(str(data.get("message") or ""), **details)  # type: ignore[arg-type]


def error_to_json(error: GpupoolError) -> dict[str, object]:
    return {"code": error.code, "message": error.message, "details": error.details}


# -- walking the outputs -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    name: str  # its path in the archive
    source: Path | None  # the file to copy (a link's target); None: a directory
    size: int = 0
    mode: int = DIRECTORY_MODE
    mtime: float = 0.0


def _start(outputs: Path, path: str) -> Path:
    """``outputs/path`` with every link resolved, checked to lie inside the outputs."""
    if not outputs.is_dir():
        raise NoModelFiles("the job left no outputs: it never ran, or wrote nothing")
    root = outputs.resolve()
    base = (root / path).resolve()
    if not _inside(base, root):
        raise BadModelPath(f"{path} leads outside the job's outputs: {BadModelPath.__doc__}")
    if not base.exists():
        raise BadModelPath(
            f"the job's outputs hold no {path}: give a path inside $GPUPOOL_OUTPUT_DIR",
            path=path,
        )
    return base


def _walk(outputs: Path, base: Path, skip: frozenset[str]) -> Iterator[_Entry]:
    """The entries below ``base`` (or ``base`` itself, a file), parents first, by name."""
    root = outputs.resolve()
    if not base.is_dir():
        yield _file_entry(_text(base.name), base, root)
        return
    stack = [(base, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as found:
            children = sorted(found, key=lambda e: e.name, reverse=True)
        for child in children:
            if not prefix and child.name in skip:
                continue
            name = _text(f"{prefix}{child.name}")
            if child.is_dir(follow_symlinks=False):
                yield _Entry(name, None, mtime=child.stat(follow_symlinks=False).st_mtime)
                stack.append((Path(child.path), f"{name}/"))
            else:
                yield _file_entry(name, Path(child.path), root)


def _text(name: str) -> str:
    """``name`` when it is UTF-8 text; else InvalidFileName naming it with its odd bytes
    escaped (a name the file system gave is decoded with surrogates for such bytes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        escaped = str(os.fsencode(name))[2:-1]
        raise InvalidFileName(
            f"{escaped} is not a UTF-8 file name: {InvalidFileName.__doc__}", path=escaped
        ) from None
    return name


def _file_entry(name: str, path: Path, root: Path) -> _Entry:
    """A regular file, or a link that leads to one inside the outputs; else BadModelPath."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        target = path.resolve()
        if not _inside(target, root):
            raise BadModelPath(
                f"{name} is a link that leads outside the job's outputs: copy the file "
                "into $GPUPOOL_OUTPUT_DIR instead of linking to it",
                path=name,
            )
        if not target.is_file() or target.is_symlink():
            raise BadModelPath(
                f"{name} is a link to a directory or to nothing: a model version takes "
                "regular files, and links to regular files inside the outputs",
                path=name,
            )
        path, info = target, os.lstat(target)
    if not stat.S_ISREG(info.st_mode):
        raise BadModelPath(
            f"{name} is {_kind(info.st_mode)}: a model version takes regular files only",
            path=name,
        )
    if info.st_nlink > 1 and info.st_uid != os.stat(root).st_uid:
        # a hard link to a file the job's account does not own (made where the kernel lets
        # anyone link to any file): the server, maybe root, would copy what the job cannot read
        raise BadModelPath(
            f"{name} is a hard link to a file the job does not own: copy the file instead",
            path=name,
        )
    return _Entry(name, path, info.st_size, file_mode(info.st_mode), info.st_mtime)


def _check(entries: list[_Entry], limits: CodeLimits, path: str) -> None:
    if not any(entry.source is not None for entry in entries):
        where = f" {path}" if path else ""
        raise NoModelFiles(f"the job's outputs{where} hold no files: {NoModelFiles.__doc__}")
    if len(entries) > limits.entries:
        raise too_large(limits)
    if sum(entry.size for entry in entries) > limits.unpacked_bytes:
        raise too_large(limits)


def _add(tar: tarfile.TarFile, entry: _Entry) -> None:
    info = tarfile.TarInfo(entry.name)
    info.mtime, info.mode = int(entry.mtime), entry.mode
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.source is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return
    fd = os.open(entry.source, READ_FLAGS)
    with os.fdopen(fd, "rb") as file:
        found = os.fstat(file.fileno())
        if not stat.S_ISREG(found.st_mode):  # swapped since it was looked at
            raise BadModelPath(f"{entry.name} is not a regular file", path=entry.name)
        info.size = found.st_size
        tar.addfile(info, file)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


# -- reading an archive back -------------------------------------------------------------------


def _member(
    member: tarfile.TarInfo, found: dict[str, PackedFile | None], limits: CodeLimits
) -> str:
    try:
        path = member_path(_text(member.name))
    except ValueError as problem:
        raise GpupoolError(f"a model archive member '{member.name}' has {problem}") from None
    if not (member.isfile() or member.isdir()) or not path or path in found:
        raise GpupoolError(f"a model archive member '{member.name}' is not a new file or directory")
    if len(found) + 1 > limits.entries:
        raise too_large(limits)
    return path


def _digest(stream: BinaryIO | None) -> str:
    sha = hashlib.sha256()
    while stream is not None and (chunk := stream.read(CHUNK)):
        sha.update(chunk)
    return sha.hexdigest()


@contextlib.contextmanager
def _opened(archive: Path | BinaryIO) -> Iterator[BinaryIO]:
    if not isinstance(archive, Path):
        yield archive
        return
    with open(archive, "rb") as file:
        yield file
