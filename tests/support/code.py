"""Code snapshot archives for tests: well-formed ones from a dict of files, hostile ones made
member by member, and their refs."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from gpupool.client.code import pack
from gpupool.domain.code import ref_of

Member = Callable[[tarfile.TarFile], None]


def ref(data: bytes) -> str:
    return ref_of(hashlib.sha256(data).hexdigest())


def packed(directory: Path) -> bytes:
    """The snapshot ``gpupool run --code`` would send of ``directory``."""
    out = io.BytesIO()
    pack(directory, out)
    return out.getvalue()


def tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path -> text) below ``root``; returns ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def archive(*members: Member, compress: bool = True) -> bytes:
    """A tar archive (gzip-compressed unless told) of ``members``, each added by a function
    of the tar file: ``regular``, ``directory``, ``special`` ..."""
    out = io.BytesIO()
    stream = gzip.GzipFile(fileobj=out, mode="wb", mtime=0) if compress else out
    with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for add in members:
            add(tar)
    if compress:
        stream.close()  # writes gzip's trailer; ``out`` stays open
    return out.getvalue()


def regular(name: str, data: bytes = b"x", mode: int = 0o644) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    return add


def directory(name: str) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)

    return add


def special(name: str, kind: bytes, target: str = "") -> Member:
    """A member of tar type ``kind`` (tarfile.SYMTYPE, LNKTYPE, CHRTYPE, FIFOTYPE...)."""

    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, target
        info.devmajor, info.devminor = 1, 3
        tar.addfile(info)

    return add


def zeros(name: str, size: int) -> Member:
    """A file of ``size`` zero bytes: a few KiB once compressed (a 'zip bomb')."""

    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, _Zeros(size))

    return add


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        count = self.left if size < 0 else min(size, self.left)
        self.left -= count
        return bytes(count)
