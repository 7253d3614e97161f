"""Code snapshots on a node: checking an archive, and unpacking it as a job's working directory.

The format is ``gpupool.domain.code``'s. ``inspect`` checks an archive as the server receives
it; ``unpack_once`` makes a job's working directory of it on the node that runs the job (the
local executor here; a Ray node agent on its own node, given the archive's path or bytes).
Both read the archive as one stream through the same checks, so a hostile archive is refused
alike on upload and on a node: a member other than a regular file or a directory (a symbolic
or hard link, a device, a FIFO), an absolute path or '..', a path given twice or below a
file, more entries or bytes than the limits. The decompressed stream is counted as it is read,
so a gzip bomb stops at the limit, not at the end of the disk or of memory. Nothing is written
outside the destination: it is a new, empty directory, and only directories and regular files
are made in it (files with O_EXCL and O_NOFOLLOW), so no link can lead a write elsewhere.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import secrets
import shutil
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from gpupool.domain.code import DIRECTORY_MODE, CodeLimits, CodeSummary, file_mode, member_path
from gpupool.domain.units import format_bytes
from gpupool.errors import BadCodeArchive, CodeTooLarge

Archive = Path | bytes  # a stored archive's path, or its bytes as a node agent received them
CHUNK = 1 << 20
HEADER_ALLOWANCE = 1024  # tar header bytes per entry, beyond the files' own bytes
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
KINDS = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
}


def inspect(archive: Archive, limits: CodeLimits) -> CodeSummary:
    """What the archive holds; BadCodeArchive (naming the member at fault) or CodeTooLarge
    when it breaks the format or the limits."""
    return _Reader(limits, None).read(archive)


def unpack_once(archive: Archive, dest: Path, limits: CodeLimits) -> CodeSummary | None:
    """Unpack the archive as the directory ``dest``, unless it is there already (None then).

    A job's snapshot is unpacked once per job per node, and its attempts share it, as they
    share their output and checkpoint directories: an attempt requeued after a preemption
    finds what the earlier one wrote into its working directory, as it would in a directory
    on a shared file system. The archive is unpacked beside ``dest`` and renamed into place
    when whole, so a crash half-way leaves no half-made working directory behind.
    """
    if dest.is_dir():
        return None
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{dest.name}.*.tmp"):  # left by a crash mid-unpack
        shutil.rmtree(stale, ignore_errors=True)
    partial = dest.parent / f".{dest.name}.{secrets.token_hex(6)}.tmp"
    os.mkdir(partial, DIRECTORY_MODE)
    try:
        summary = _Reader(limits, partial).read(archive)
        os.rename(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return summary


class _TooMuch(Exception):
    """The decompressed stream went past what the limits allow."""


class _Counted(io.RawIOBase):
    """The decompressed archive, counted as it is read, refusing to read past ``limit``
    (a tar header can claim any size: tarfile would read all of it into memory)."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self.stream, self.limit, self.seen = stream, limit, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = CHUNK if size is None or size < 0 else size
        if self.seen + want > self.limit:
            want = self.limit - self.seen + 1  # one byte more shows it goes past
        data = self.stream.read(want)
        self.seen += len(data)
        if self.seen > self.limit:
            raise _TooMuch()
        return data


class _Reader:
    """One pass over an archive: every member checked, and written below ``dest`` if given."""

    def __init__(self, limits: CodeLimits, dest: Path | None) -> None:
        self.limits, self.dest = limits, dest
        self.kinds: dict[str, bool] = {"": True}  # path -> is a directory ('' the root)
        self.implied: set[str] = set()  # directories made for a path below them, unlisted yet
        self.entries = self.files = self.size = 0
        self.mtimes: list[tuple[str, float]] = []  # directories', set once their files are in

    def read(self, archive: Archive) -> CodeSummary:
        stream_limit = self.limits.unpacked_bytes + HEADER_ALLOWANCE * (self.limits.entries + 2)
        try:
            with _opened(archive, self.limits) as raw, gzip.GzipFile(fileobj=raw) as unzipped:
                counted = _Counted(unzipped, stream_limit)
                with tarfile.open(fileobj=counted, mode="r|") as tar:
                    for member in tar:
                        self._take(tar, member)
        except _TooMuch:
            raise self._too_large("unpacks to more than") from None
        except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
            if isinstance(error, OSError) and not _format_error(error):
                raise
            raise BadCodeArchive(
                f"the archive is not a whole gzip-compressed tar archive ({error}): " + _HOW_TO_PACK
            ) from None
        self._set_directory_times()
        return CodeSummary(self.files, self.size)

    def _take(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        path = self._checked_path(member)
        self.entries += 1
        if self.entries > self.limits.entries:
            raise self._too_large(f"holds more than {self.limits.entries:,} entries, over")
        if member.isdir():
            self._directory(path, member)
        else:
            self._file(tar, path, member)

    def _checked_path(self, member: tarfile.TarInfo) -> str:
        try:
            path = member_path(member.name)
        except ValueError as problem:
            raise _bad(member.name, f"has {problem}") from None
        if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
            kind = KINDS.get(member.type, f"an entry of tar type {member.type!r}")
            raise _bad(member.name, f"is {kind}: only regular files and directories travel")
        if path == "" and not member.isdir():
            raise _bad(member.name, "names the archive's root but is not a directory")
        listed_late = member.isdir() and path in self.implied  # tar may list a parent after
        if path in self.kinds and path != "" and not listed_late:
            raise _bad(member.name, "appears twice")
        return path

    def _directory(self, path: str, member: tarfile.TarInfo) -> None:
        self._parents(path)
        if path and path not in self.implied:
            self.kinds[path] = True
            if self.dest is not None:
                os.mkdir(self.dest / path, DIRECTORY_MODE)
        self.implied.discard(path)
        self.mtimes.append((path, member.mtime))

    def _file(self, tar: tarfile.TarFile, path: str, member: tarfile.TarInfo) -> None:
        self.size += member.size
        if self.size > self.limits.unpacked_bytes:
            raise self._too_large("unpacks to more than")
        self._parents(path)
        self.kinds[path] = False
        self.files += 1
        if self.dest is None:
            return  # tarfile skips the member's data on the next step of the stream
        source = tar.extractfile(member)
        target = self.dest / path
        fd = os.open(target, WRITE_FLAGS, file_mode(member.mode))
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out, CHUNK)
            os.fchmod(out.fileno(), file_mode(member.mode))  # the umask may have taken bits
        _set_mtime(target, member.mtime)

    def _parents(self, path: str) -> None:
        """Make the directories above ``path`` that the archive did not list before it; a
        path below a file is refused (it would need the file to be a directory)."""
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/".join(parts[:depth])
            known = self.kinds.get(parent)
            if known is False:
                raise _bad(path, f"lies below {parent}, which is a file")
            if known is None:
                self.kinds[parent] = True
                self.implied.add(parent)
                if self.dest is not None:
                    os.mkdir(self.dest / parent, DIRECTORY_MODE)

    def _set_directory_times(self) -> None:
        if self.dest is None:
            return
        for path, mtime in sorted(self.mtimes, key=lambda item: -item[0].count("/")):
            _set_mtime(self.dest / path, mtime)

    def _too_large(self, what: str) -> CodeTooLarge:
        limits = self.limits
        return CodeTooLarge(
            f"the code snapshot {what} this server takes ({format_bytes(limits.unpacked_bytes)}"
            f" of files, {limits.entries:,} entries): leave big files out with a .gpupoolignore "
            "(gitignore syntax), or keep the code on a shared file system and give its path "
            "with --workdir",
            max_unpacked_bytes=limits.unpacked_bytes,
            max_entries=limits.entries,
        )


_HOW_TO_PACK = "pack it with gpupool run --code, or tar czf code.tar.gz -C DIR ."


@contextlib.contextmanager
def _opened(archive: Archive, limits: CodeLimits) -> Iterator[BinaryIO]:
    """The archive's bytes as a file; CodeTooLarge when it is larger than the limit."""
    size = len(archive) if isinstance(archive, bytes) else os.stat(archive).st_size
    if size > limits.archive_bytes:
        raise CodeTooLarge(
            f"the code snapshot is {format_bytes(size)}, more than the "
            f"{format_bytes(limits.archive_bytes)} this server takes",
            size_bytes=size,
            max_bytes=limits.archive_bytes,
        )
    if isinstance(archive, bytes):
        yield io.BytesIO(archive)
        return
    with open(archive, "rb") as file:
        yield file


def _set_mtime(path: Path, mtime: float) -> None:
    """Keep the packed modification time (make and friends compare them); an absurd one
    (a hostile header's) is left as the time of unpacking."""
    with contextlib.suppress(OSError, OverflowError, ValueError):
        os.utime(path, (mtime, mtime), follow_symlinks=False)


def _format_error(error: OSError) -> bool:
    """gzip's complaints about its input are OSErrors too; a real I/O failure is not one."""
    return isinstance(error, gzip.BadGzipFile) or error.errno is None


def _bad(name: str, problem: str) -> BadCodeArchive:
    shown = name if len(name) <= 200 else name[:199] + "…"
    return BadCodeArchive(
        f"member '{shown}' of the archive {problem}; {_HOW_TO_PACK}", member=shown
    )
