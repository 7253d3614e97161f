"""Packing a working directory into a code snapshot, and sending it to the server once.

``pack`` writes the directory as the archive ``gpupool.domain.code`` describes: regular files
and directories in a fixed order (by name, depth first), modes 0644/0755, no owners, the
files' modification times, gzip without a name or time in its header; so the same tree gives
the same bytes, and the same name, on every machine. Left out: ``.git``, what the tree's
``.gitignore`` files ignore (with git's rules: each applies below its directory, a deeper one
wins, ``!`` re-includes, an ignored directory is not entered), what ``.gpupoolignore`` at the
top ignores (same syntax, applied last), and anything that is not a regular file or directory
(symbolic links, sockets: counted and reported, never followed).

``send`` packs, asks the server whether the caller stored these bytes already, and uploads
them if not. The CLI imports this module only for ``gpupool run --code``: pathspec and tarfile
cost start-up time every other command need not pay (benchmarks/cli_startup.py).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pathspec

from gpupool.client.api import ApiError, Client
from gpupool.domain.code import DIRECTORY_MODE, CodeLimits, file_mode, ref_of
from gpupool.domain.units import format_bytes

GITIGNORE = ".gitignore"
GPUPOOLIGNORE = ".gpupoolignore"
ALWAYS_LEFT_OUT = frozenset({".git"})
BIGGEST_SHOWN = 5
COPY_CHUNK = 1 << 20


class PackError(Exception):
    """The directory cannot be sent as it is; ``code`` is a stable name, as the server's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class Entry:
    """A file or directory to pack: its path in the archive and its ``lstat``."""

    path: str
    absolute: Path
    st: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)


@dataclass
class Tree:
    """What ``walk`` found: the entries to pack, and what it left out that is not ignored."""

    entries: list[Entry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # links, sockets...: never followed

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries if not e.is_dir)

    @property
    def file_bytes(self) -> int:
        return sum(e.st.st_size for e in self.entries if not e.is_dir)


@dataclass(frozen=True)
class Packed:
    """An archive written: its name (``sha256:<hex>``), size, files and their bytes."""

    ref: str
    size_bytes: int
    files: int
    file_bytes: int
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sent:
    """A snapshot the server holds for the caller; ``uploaded``: False when it had it."""

    packed: Packed
    uploaded: bool


def send(client: Client, directory: Path) -> Sent:
    """Pack ``directory`` and make sure the server holds it for the caller; PackError when
    it cannot be packed or is larger than the server takes (checked before uploading)."""
    limits = client.code_limits()
    with tempfile.TemporaryFile(prefix="gpupool-code-") as archive:
        packed = pack(directory, archive, limits)
        if _held(client, packed.ref):
            return Sent(packed, uploaded=False)
        archive.seek(0)
        client.upload_code(packed.ref, archive, packed.size_bytes)
    return Sent(packed, uploaded=True)


def pack(directory: Path, out: BinaryIO, limits: CodeLimits = CodeLimits()) -> Packed:
    """Write ``directory`` into ``out`` as a snapshot; PackError (``code_too_large``) as soon
    as it is sure to be larger than ``limits`` allow, naming its biggest parts."""
    root = Path(directory)
    if not root.is_dir():
        raise PackError("not_a_directory", f"{root} is not a directory: send a directory")
    tree = walk(root)
    if tree.file_bytes > limits.unpacked_bytes or len(tree.entries) > limits.entries:
        what = f"holds {format_bytes(tree.file_bytes)} in {len(tree.entries):,} entries"
        raise _too_large(root, tree, limits, what)
    digest = _Hashing(out)
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=digest, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in tree.entries:
            _add(tar, entry)
            if digest.size > limits.archive_bytes:
                break
    if digest.size > limits.archive_bytes:
        what = f"packs to more than {format_bytes(limits.archive_bytes)}"
        raise _too_large(root, tree, limits, what)
    skipped = tuple(tree.skipped)
    return Packed(ref_of(digest.hexdigest()), digest.size, tree.files, tree.file_bytes, skipped)


def walk(root: Path) -> Tree:
    """The entries of ``root`` to pack, in archive order; see the module's docstring."""
    tree = Tree()
    top = _spec(root / GPUPOOLIGNORE)
    _walk_dir(root, "", [], top, tree)
    return tree


Rules = list[tuple[str, pathspec.PathSpec]]  # (directory prefix, its .gitignore), top first


def _walk_dir(
    directory: Path, prefix: str, rules: Rules, top: pathspec.PathSpec | None, tree: Tree
) -> None:
    own = _spec(directory / GITIGNORE)
    rules = [*rules, (prefix, own)] if own is not None else rules
    for name in sorted(_names(directory)):
        if name in ALWAYS_LEFT_OUT:
            continue
        path = f"{prefix}{name}"
        absolute = directory / name
        st = os.lstat(absolute)
        is_dir = stat.S_ISDIR(st.st_mode)
        if _ignored(path, is_dir, rules, top):
            continue
        if not (is_dir or stat.S_ISREG(st.st_mode)):
            tree.skipped.append(path)
            continue
        tree.entries.append(Entry(path, absolute, st))
        if is_dir:
            _walk_dir(absolute, f"{path}/", rules, top, tree)


def _ignored(path: str, is_dir: bool, rules: Rules, top: pathspec.PathSpec | None) -> bool:
    """Git's answer: the last rule that matches decides, the deepest file's rules last,
    .gpupoolignore after all of them. A directory is matched as 'name/'."""
    decided = None
    for base, spec in [*rules, ("", top)] if top is not None else rules:
        relative = path[len(base) :] + ("/" if is_dir else "")
        include = spec.check_file(relative).include
        if include is not None:
            decided = include
    return bool(decided)


def _spec(path: Path) -> pathspec.PathSpec | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as error:
        raise PackError("unreadable", f"cannot read {path}: {error.strerror}") from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError as error:
        raise PackError(
            "unreadable",
            f"cannot read the directory {directory}: {error.strerror}; leave it out with "
            f"{GPUPOOLIGNORE}",
        ) from None


def _add(tar: tarfile.TarFile, entry: Entry) -> None:
    info = tarfile.TarInfo(entry.path)
    info.mtime = int(entry.st.st_mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.is_dir:
        info.type, info.mode = tarfile.DIRTYPE, DIRECTORY_MODE
        tar.addfile(info)
        return
    info.mode, info.size = file_mode(entry.st.st_mode), entry.st.st_size
    try:
        with open(entry.absolute, "rb") as source:
            tar.addfile(info, source)
    except OSError as error:
        reason = error.strerror or str(error)  # tarfile's own: the file got shorter
        raise PackError(
            "unreadable",
            f"cannot pack {entry.absolute}: {reason}; leave it out with {GPUPOOLIGNORE}, or "
            "try again once it no longer changes",
        ) from None


def _held(client: Client, ref: str) -> bool:
    try:
        client.code(ref)
    except ApiError as error:
        if error.code == "code_not_found":
            return False
        raise
    return True


def _too_large(root: Path, tree: Tree, limits: CodeLimits, what: str) -> PackError:
    biggest = ", ".join(f"{path} {format_bytes(size)}" for path, size in biggest_parts(tree))
    # the way out before the list of parts: a long list is what a cut error line loses
    return PackError(
        "code_too_large",
        f"{root} is too large to send: it {what}; this server takes "
        f"{format_bytes(limits.archive_bytes)} packed, {format_bytes(limits.unpacked_bytes)} "
        f"of files, {limits.entries:,} entries. Leave big files out with a {GPUPOOLIGNORE} "
        "there (gitignore syntax), or put the code on a file system the server shares and "
        f"give its path with --workdir, without --code. Biggest: {biggest or '-'}",
    )


def biggest_parts(tree: Tree, count: int = BIGGEST_SHOWN) -> list[tuple[str, int]]:
    """The largest directories and files (a directory as the sum of its files), none
    inside another one shown: 'data/ 2 GiB, model.bin 300 MiB'."""
    sizes: dict[str, int] = {}
    for entry in tree.entries:
        if entry.is_dir:
            continue
        sizes[entry.path] = entry.st.st_size
        parts = entry.path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            key = "/".join(parts[:depth]) + "/"
            sizes[key] = sizes.get(key, 0) + entry.st.st_size
    chosen: list[tuple[str, int]] = []
    for path, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        if not any(path.startswith(shown) for shown, _ in chosen if shown.endswith("/")):
            chosen.append((path, size))
        if len(chosen) == count:
            break
    return chosen


class _Hashing:
    """A writable file that hashes and counts what passes through it."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.size, self._sha = out, 0, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._sha.update(data)
        self.size += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()

    def hexdigest(self) -> str:
        return self._sha.hexdigest()
