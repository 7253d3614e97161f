"""Packing a working directory (gpupool.client.code): git's ignore rules, what never travels,
the same bytes for the same tree, and a clear refusal when it is too large."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from gpupool.client.code import PackError, biggest_parts, pack, walk
from gpupool.domain.code import CodeLimits
from tests.support.code import ref, tree


def packed_names(root: Path) -> list[str]:
    """The member names of the archive ``pack`` writes, in its order."""
    out = io.BytesIO()
    pack(root, out)
    out.seek(0)
    with tarfile.open(fileobj=out, mode="r:gz") as tar:
        return [m.name + ("/" if m.isdir() else "") for m in tar.getmembers()]


def test_gitignore_files_apply_below_their_directory_and_negation_reincludes(
    tmp_path: Path,
) -> None:
    tree(
        tmp_path,
        {
            ".gitignore": "*.log\n/build/\nsecret.txt\n",
            "train.py": "",
            "run.log": "",
            "build/out.bin": "",
            "src/build/kept.py": "",  # /build/ is anchored at the top
            "src/.gitignore": "!keep.log\n*.tmp\n",
            "src/keep.log": "",
            "src/drop.log": "",
            "src/x.tmp": "",
            "x.tmp": "",  # src/.gitignore's *.tmp does not reach up
            "secret.txt": "",
        },
    )
    assert packed_names(tmp_path) == [
        ".gitignore",
        "src/",
        "src/.gitignore",
        "src/build/",
        "src/build/kept.py",
        "src/keep.log",
        "train.py",
        "x.tmp",
    ]


def test_gpupoolignore_applies_last_and_git_is_always_left_out(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            ".gitignore": "!data/\n",
            ".gpupoolignore": "data/\n*.ckpt\n!best.ckpt\n",
            ".git/HEAD": "ref: refs/heads/main\n",
            "sub/.git": "gitdir: ../.git/modules/sub\n",  # a submodule's .git file
            "data/big.bin": "",
            "model.ckpt": "",
            "best.ckpt": "",
            "main.py": "",
        },
    )
    names = packed_names(tmp_path)
    assert names == [".gitignore", ".gpupoolignore", "best.ckpt", "main.py", "sub/"]


def test_an_ignored_directory_is_not_entered(tmp_path: Path) -> None:
    """As git: a file in an excluded directory cannot be re-included."""
    tree(tmp_path, {".gitignore": "cache/\n!cache/keep.txt\n", "cache/keep.txt": "", "a": ""})
    assert packed_names(tmp_path) == [".gitignore", "a"]


def test_links_and_special_files_are_left_out_and_reported(tmp_path: Path) -> None:
    tree(tmp_path, {"a.py": ""})
    (tmp_path / "to-passwd").symlink_to("/etc/passwd")
    (tmp_path / "to-a").symlink_to("a.py")
    os.mkfifo(tmp_path / "pipe")
    packed = pack(tmp_path, io.BytesIO())
    assert packed.skipped == ("pipe", "to-a", "to-passwd")
    assert packed_names(tmp_path) == ["a.py"]


def test_the_same_tree_gives_the_same_bytes_and_the_ref_is_their_hash(tmp_path: Path) -> None:
    files = {"a/b.py": "print('b')\n", "c.txt": "c\n"}
    first, second = tree(tmp_path / "one", files), tree(tmp_path / "two", files)
    for root in (first, second):  # same contents and times, different places and inodes
        for path in root.rglob("*"):
            os.utime(path, (1_700_000_000, 1_700_000_000))
    one, two = io.BytesIO(), io.BytesIO()

    packed = pack(first, one)

    assert pack(second, two).ref == packed.ref
    assert one.getvalue() == two.getvalue()
    assert packed.ref == ref(one.getvalue())
    assert (packed.files, packed.file_bytes, packed.size_bytes) == (2, 13, len(one.getvalue()))


def test_a_changed_file_changes_the_ref(tmp_path: Path) -> None:
    tree(tmp_path, {"a.py": "1"})
    before = pack(tmp_path, io.BytesIO()).ref
    (tmp_path / "a.py").write_text("2")
    assert pack(tmp_path, io.BytesIO()).ref != before


def test_owners_and_odd_mode_bits_do_not_travel(tmp_path: Path) -> None:
    tree(tmp_path, {"run.sh": "", "data.txt": ""})
    (tmp_path / "run.sh").chmod(0o4770)  # setuid, group-writable
    (tmp_path / "data.txt").chmod(0o666)
    out = io.BytesIO()
    pack(tmp_path, out)
    out.seek(0)
    with tarfile.open(fileobj=out, mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert oct(members["run.sh"].mode) == oct(0o755)
    assert oct(members["data.txt"].mode) == oct(0o644)
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members.values()} == {(0, 0, "", "")}


def test_too_large_names_the_size_the_cap_the_biggest_parts_and_the_way_out(
    tmp_path: Path,
) -> None:
    tree(tmp_path, {"data/a.bin": "a" * 6000, "data/b.bin": "b" * 3000, "model.pt": "m" * 2000})
    tree(tmp_path, {"small.py": "x"})
    limits = CodeLimits(archive_bytes=10_000, unpacked_bytes=10_000, entries=100)

    with pytest.raises(PackError) as refused:
        pack(tmp_path, io.BytesIO(), limits)

    message = refused.value.message
    assert refused.value.code == "code_too_large"
    assert "holds 10.7 KiB" in message and "9.8 KiB of files" in message
    assert "Biggest: data/ 8.8 KiB, model.pt 2.0 KiB, small.py 1 B" in message
    assert ".gpupoolignore" in message and "--workdir, without --code" in message


def test_an_archive_over_its_cap_is_refused_once_the_packed_bytes_pass_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "random.bin").write_bytes(os.urandom(50_000))  # does not compress
    limits = CodeLimits(archive_bytes=20_000, unpacked_bytes=1 << 20, entries=100)
    with pytest.raises(PackError, match="packs to more than 19.5 KiB"):
        pack(tmp_path, io.BytesIO(), limits)


def test_biggest_parts_shows_a_directory_once_not_its_files(tmp_path: Path) -> None:
    tree(tmp_path, {"d/e/f.bin": "x" * 50, "d/g.bin": "x" * 10, "h.bin": "x" * 30})
    assert biggest_parts(walk(tmp_path), 2) == [("d/", 60), ("h.bin", 30)]


def test_a_path_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="is not a directory"):
        pack(tmp_path / "missing", io.BytesIO())
