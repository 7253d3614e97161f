"""Packing a job's outputs as a model version's archive: the files and only them, in the
code snapshots' format (any node unpacks it), the same bytes for the same tree, checked
limits, links followed only inside the outputs, and special files refused."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from gpupool.domain.code import CodeLimits
from gpupool.domain.models import parse_reference, source_path
from gpupool.errors import BadModelPath, ModelTooLarge, NoModelFiles
from gpupool.executors.code import unpack_once
from gpupool.executors.outputs import error_from_json, error_to_json, index, pack


def tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def packed(outputs: Path, path: str = "", limits: CodeLimits = CodeLimits(), **kw) -> bytes:  # noqa: ANN003, B008
    into = io.BytesIO()
    pack(outputs, path, limits, into, **kw)
    return into.getvalue()


def test_a_packed_tree_unpacks_on_a_node_and_lists_its_files(tmp_path: Path) -> None:
    files = {"w.bin": b"\0\1" * 100, "cfg/config.json": b"{}", "run.sh": b"#!/bin/sh\n"}
    outputs = tree(tmp_path / "outputs", files)
    (outputs / "run.sh").chmod(0o755)
    (outputs / ".gpupool").mkdir()
    (outputs / "link.bin").symlink_to("w.bin")

    data = packed(outputs, skip=frozenset({".gpupool"}))
    unpack_once(data, tmp_path / "node", CodeLimits())

    listed = index(io.BytesIO(data), CodeLimits())
    expected = files | {"link.bin": files["w.bin"]}
    assert [(f.path, f.size, f.sha256) for f in listed] == [
        (p, len(d), hashlib.sha256(d).hexdigest()) for p, d in sorted(expected.items())
    ]
    assert {p: (tmp_path / "node" / p).read_bytes() for p in expected} == expected
    assert os.stat(tmp_path / "node" / "run.sh").st_mode & 0o777 == 0o755
    assert not (tmp_path / "node" / ".gpupool").exists()
    assert packed(outputs, skip=frozenset({".gpupool"})) == data  # the same tree, same bytes


def test_one_file_is_packed_by_its_name(tmp_path: Path) -> None:
    outputs = tree(tmp_path / "outputs", {"ckpt/best.pt": b"best"})
    listed = index(io.BytesIO(packed(outputs, "ckpt/best.pt")), CodeLimits())
    assert [(f.path, f.size) for f in listed] == [("best.pt", 4)]


@pytest.mark.parametrize(
    ("make", "path"),
    [
        (lambda o: (o / "l").symlink_to("/etc/passwd"), ""),
        (lambda o: (o / "l").symlink_to("../secret"), ""),
        (lambda o: (o / "l").symlink_to("/etc"), ""),
        (lambda o: (o / "l").symlink_to("missing"), ""),
        (lambda o: os.mkfifo(o / "pipe"), ""),
        (lambda o: (o / "up").symlink_to(".."), "up"),
        (lambda o: None, "nowhere"),
    ],
    ids=[
        "absolute-link",
        "relative-link-out",
        "dir-link",
        "dangling",
        "fifo",
        "path-link",
        "missing",
    ],
)
def test_what_leads_out_or_is_not_a_file_is_refused_before_anything_is_written(
    tmp_path: Path,
    make,
    path: str,  # noqa: ANN001
) -> None:
    (tmp_path / "secret").write_bytes(b"secret")
    outputs = tree(tmp_path / "outputs", {"ok.bin": b"ok"})
    make(outputs)
    into = io.BytesIO()
    with pytest.raises(BadModelPath):
        pack(outputs, path, CodeLimits(), into)
    assert into.getvalue() == b""


def test_limits_and_empty_outputs(tmp_path: Path) -> None:
    outputs = tree(tmp_path / "outputs", {"a": b"x" * 10, "b": b"y" * 10})
    with pytest.raises(ModelTooLarge):
        packed(outputs, limits=CodeLimits(unpacked_bytes=19))
    with pytest.raises(ModelTooLarge):
        packed(outputs, limits=CodeLimits(entries=1))
    (tmp_path / "empty" / "dir").mkdir(parents=True)
    with pytest.raises(NoModelFiles):
        packed(tmp_path / "empty")
    with pytest.raises(NoModelFiles):
        packed(tmp_path / "never-made")


def test_an_agents_refusal_comes_back_as_the_same_error() -> None:
    error = error_from_json(error_to_json(BadModelPath("l leads out", path="l")))
    assert isinstance(error, BadModelPath) and error.message == "l leads out"
    assert error.details == {"path": "l"}


def test_references_and_source_paths() -> None:
    assert parse_reference("resnet") == ("resnet", None)
    assert parse_reference("resnet-50.v2:12") == ("resnet-50.v2", 12)
    for bad in ("resnet:0", "resnet:x", ":3", "-x", "a/b"):
        with pytest.raises(ValueError):
            parse_reference(bad)
    assert source_path("./model//sub/") == "model/sub"
    assert source_path(None) == ""
    for bad in ("/etc", "a/../../b", "..", "a\0b"):
        with pytest.raises(ValueError):
            source_path(bad)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to give the outputs to another user")
def test_a_hard_link_to_a_file_the_job_does_not_own_is_refused(tmp_path: Path) -> None:
    (tmp_path / "shadow").write_bytes(b"root's secret")
    outputs = tree(tmp_path / "outputs", {"own.bin": b"mine"})
    os.chown(outputs / "own.bin", 65534, 65534)
    os.link(outputs / "own.bin", outputs / "own-again.bin")  # the job's own: fine
    os.chown(outputs, 65534, 65534)  # the job's account owns its outputs
    assert len(index(io.BytesIO(packed(outputs)), CodeLimits())) == 2

    os.link(tmp_path / "shadow", outputs / "shadow")
    with pytest.raises(BadModelPath, match="hard link"):
        packed(outputs)
