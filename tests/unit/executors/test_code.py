"""Checking and unpacking code snapshots (gpupool.executors.code): what a well-formed archive
gives, and every way a hostile one is refused before anything lands outside its directory."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

from gpupool.domain.code import CodeLimits
from gpupool.errors import BadCodeArchive, CodeTooLarge
from gpupool.executors.code import inspect, unpack_once
from tests.support.code import archive, directory, packed, regular, special, tree, zeros

SMALL = CodeLimits(archive_bytes=1 << 20, unpacked_bytes=1 << 20, entries=50)


def test_a_packed_tree_unpacks_to_the_same_files_modes_and_times(tmp_path: Path) -> None:
    source = tree(tmp_path / "src", {"train.py": "print(1)\n", "data/a.csv": "1,2\n"})
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o750)
    os.utime(source / "train.py", (1_600_000_000, 1_600_000_000))
    dest = tmp_path / "job" / "code"

    summary = unpack_once(packed(source), dest, SMALL)

    assert (summary.files, summary.unpacked_bytes) == (3, 9 + 4 + 10)
    assert (dest / "train.py").read_text() == "print(1)\n"
    assert (dest / "data" / "a.csv").read_text() == "1,2\n"
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "train.py").stat().st_mode) == 0o644
    assert stat.S_IMODE((dest / "data").stat().st_mode) == 0o755
    assert (dest / "train.py").stat().st_mtime == 1_600_000_000


def test_inspect_counts_without_writing(tmp_path: Path) -> None:
    data = archive(directory("./"), directory("./a"), regular("./a/b", b"12345"))
    assert inspect(data, SMALL).files == 1
    assert inspect(data, SMALL).unpacked_bytes == 5
    assert list(tmp_path.iterdir()) == []


def test_a_second_unpack_keeps_what_the_first_attempt_left(tmp_path: Path) -> None:
    dest = tmp_path / "code"
    data = archive(regular("notes.txt", b"v1"))
    assert unpack_once(data, dest, SMALL) is not None
    (dest / "notes.txt").write_text("written by attempt 1")

    assert unpack_once(data, dest, SMALL) is None
    assert (dest / "notes.txt").read_text() == "written by attempt 1"


def test_a_parent_listed_after_its_file_is_taken(tmp_path: Path) -> None:
    data = archive(regular("a/b.txt", b"b"), directory("a"))
    unpack_once(data, tmp_path / "code", SMALL)
    assert (tmp_path / "code" / "a" / "b.txt").read_bytes() == b"b"


@pytest.mark.parametrize(
    ("member", "said"),
    [
        (regular("../escape.txt"), "has a '..' in its path"),
        (regular("a/../../escape.txt"), "has a '..' in its path"),
        (regular("/etc/escape.txt"), "has an absolute path"),
        (special("link", tarfile.SYMTYPE, "/etc/passwd"), "is a symbolic link"),
        (special("inside", tarfile.SYMTYPE, "other.txt"), "is a symbolic link"),
        (special("hard", tarfile.LNKTYPE, "/etc/shadow"), "is a hard link"),
        (special("null", tarfile.CHRTYPE), "is a character device"),
        (special("disk", tarfile.BLKTYPE), "is a block device"),
        (special("pipe", tarfile.FIFOTYPE), "is a FIFO"),
    ],
)
def test_a_hostile_member_is_refused_by_name_and_nothing_is_left(
    tmp_path: Path, member, said: str
) -> None:  # noqa: ANN001
    data = archive(regular("ok.txt"), member)
    dest = tmp_path / "job" / "code"

    with pytest.raises(BadCodeArchive) as refused:
        unpack_once(data, dest, SMALL)

    assert said in refused.value.message
    assert refused.value.details["member"] in refused.value.message
    assert not dest.exists()
    assert os.listdir(tmp_path / "job") == []  # the partial directory went too
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "job/escape.txt").exists()
    with pytest.raises(BadCodeArchive):
        inspect(data, SMALL)


def test_a_symlink_then_a_file_through_it_never_writes_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    data = archive(special("dir", tarfile.SYMTYPE, str(outside)), regular("dir/owned.txt"))
    with pytest.raises(BadCodeArchive):
        unpack_once(data, tmp_path / "code", SMALL)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("members", "said"),
    [
        ((regular("a.txt"), regular("a.txt")), "appears twice"),
        ((regular("a"), regular("a/b.txt")), "lies below a, which is a file"),
        ((regular("./"),), "names the archive's root but is not a directory"),
    ],
)
def test_a_tree_that_cannot_be_made_is_refused(tmp_path: Path, members, said: str) -> None:  # noqa: ANN001
    with pytest.raises(BadCodeArchive, match=said):
        unpack_once(archive(*members), tmp_path / "code", SMALL)
    assert not (tmp_path / "code").exists()


def test_a_gzip_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    bomb = archive(zeros("zeros.bin", 64 << 20))  # 64 MiB of zeros: about 64 KiB packed
    assert len(bomb) < SMALL.archive_bytes

    with pytest.raises(CodeTooLarge, match="unpacks to more than") as refused:
        unpack_once(bomb, tmp_path / "code", SMALL)

    assert refused.value.details["max_unpacked_bytes"] == SMALL.unpacked_bytes
    assert not (tmp_path / "code").exists()


def test_many_small_files_past_the_bytes_limit_are_refused(tmp_path: Path) -> None:
    files = [regular(f"f{i}", bytes(100_000)) for i in range(12)]  # 1.2 MB in all
    with pytest.raises(CodeTooLarge):
        unpack_once(archive(*files), tmp_path / "code", SMALL)


def test_a_pax_header_claiming_gigabytes_is_not_read_into_memory() -> None:
    header = tarfile.TarInfo("big-header")
    header.pax_headers = {"comment": "x" * (4 << 20)}  # a 4 MiB extended header
    data = archive(lambda tar: tar.addfile(header))
    with pytest.raises(CodeTooLarge):
        inspect(data, SMALL)


def test_too_many_entries_are_refused() -> None:
    files = [regular(f"f{i}") for i in range(SMALL.entries + 1)]
    with pytest.raises(CodeTooLarge, match="entries"):
        inspect(archive(*files), SMALL)


def test_an_archive_over_the_size_limit_is_refused_before_it_is_read() -> None:
    data = archive(regular("a"))
    with pytest.raises(CodeTooLarge) as refused:
        inspect(data, CodeLimits(archive_bytes=len(data) - 1))
    assert refused.value.details == {"size_bytes": len(data), "max_bytes": len(data) - 1}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an archive at all",
        archive(regular("a.txt"), compress=False),  # a tar, not gzip-compressed
        archive(regular("a.txt", bytes(4096)))[:-30],  # cut short
    ],
    ids=["empty", "text", "uncompressed", "truncated"],
)
def test_what_is_not_a_whole_tar_gz_is_refused(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(BadCodeArchive, match="not a whole gzip-compressed tar archive"):
        unpack_once(data, tmp_path / "code", SMALL)
    assert not (tmp_path / "code").exists()


def test_a_half_made_directory_of_a_crash_is_cleared(tmp_path: Path) -> None:
    stale = tmp_path / ".code.0123456789ab.tmp"
    stale.mkdir()
    (stale / "half.txt").write_text("left by a crash")
    unpack_once(archive(regular("a.txt")), tmp_path / "code", SMALL)
    assert not stale.exists()
    assert sorted(os.listdir(tmp_path)) == ["code"]


def test_the_archive_may_be_given_as_a_path(tmp_path: Path) -> None:
    path = tmp_path / "code.tar.gz"
    path.write_bytes(archive(regular("a.txt", b"from a file")))
    unpack_once(path, tmp_path / "code", SMALL)
    assert (tmp_path / "code" / "a.txt").read_bytes() == b"from a file"
