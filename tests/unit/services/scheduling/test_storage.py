"""The storage scan: what a team's files take, as du counts them, each finished job's
directory walked once; and the reserve kept for the database."""

from __future__ import annotations

import os
from pathlib import Path

from gpupool.executors.usage import FilesScan, NodeFiles, tree_bytes
from gpupool.services.core import Reserve
from gpupool.services.core._datadir import RESERVE_FILE
from gpupool.services.scheduling._storage import StorageScan, TeamFiles, TeamUsage
from gpupool.settings import Settings

MIB = 1024**2


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def team(jobs: dict[int, bool], users: tuple[str, ...] = (), known: int = 0) -> TeamFiles:
    return TeamFiles(1, "vision", 10 * MIB, jobs, frozenset(users), known)


def test_tree_bytes_counts_what_the_files_take_and_a_missing_tree_as_nothing(
    tmp_path: Path,
) -> None:
    write(tmp_path / "a" / "big.bin", 3 * MIB)
    write(tmp_path / "a" / "b" / "c" / "deep.bin", MIB)

    assert 4 * MIB <= tree_bytes(tmp_path / "a") < 4 * MIB + 64 * 1024
    assert tree_bytes(tmp_path / "missing") == 0


def test_a_file_linked_twice_counts_once_and_links_out_are_not_followed(
    tmp_path: Path,
) -> None:
    outside = write(tmp_path / "outside" / "huge.bin", 8 * MIB)
    inside = write(tmp_path / "job" / "model.bin", 2 * MIB)
    os.link(inside, tmp_path / "job" / "again.bin")
    (tmp_path / "job" / "escape").symlink_to(outside)
    (tmp_path / "job" / "escape-dir").symlink_to(outside.parent)

    assert 2 * MIB <= tree_bytes(tmp_path / "job") < 3 * MIB


def test_a_team_counts_its_jobs_workspaces_and_archives(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    write(settings.jobs_dir / "1" / "outputs" / "w.bin", 2 * MIB)
    write(settings.jobs_dir / "2" / "checkpoints" / "c.bin", MIB)
    write(tmp_path / "workspaces" / "ann" / "nb.ipynb", MIB)
    write(settings.jobs_dir / "3" / "outputs" / "not-theirs.bin", 5 * MIB)

    [found] = StorageScan(settings).measure([team({1: True, 2: False}, ("ann",), 3 * MIB)])

    assert 7 * MIB <= found.used < 7 * MIB + 256 * 1024
    assert MIB <= found.running < MIB + 64 * 1024  # job 2 is not finished
    assert found.over is False


def test_a_finished_jobs_directory_is_walked_once_a_running_ones_each_time(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path)
    write(settings.jobs_dir / "1" / "outputs" / "a.bin", MIB)
    write(settings.jobs_dir / "2" / "outputs" / "a.bin", MIB)
    scan = StorageScan(settings)
    first = scan.measure([team({1: True, 2: False})])[0].used

    write(settings.jobs_dir / "1" / "outputs" / "b.bin", 4 * MIB)  # finished: not walked again
    write(settings.jobs_dir / "2" / "outputs" / "b.bin", 4 * MIB)  # still running: walked
    second = scan.measure([team({1: True, 2: False})])[0].used

    assert 4 * MIB <= second - first < 5 * MIB


def test_a_team_is_over_only_past_its_quota() -> None:
    assert TeamUsage(1, "t", 10, 11).over
    assert not TeamUsage(1, "t", 10, 10).over
    assert not TeamUsage(1, "t", None, 10**12).over


def test_the_reserve_is_made_once_given_back_once_and_made_again(tmp_path: Path) -> None:
    reserve = Reserve(tmp_path, MIB, 1024)

    assert reserve.keep()
    assert (tmp_path / RESERVE_FILE).stat().st_blocks * 512 >= MIB  # allocated, not sparse
    assert (tmp_path / RESERVE_FILE).stat().st_mode & 0o777 == 0o600
    assert not reserve.low()
    assert reserve.release()
    assert not (tmp_path / RESERVE_FILE).exists()
    assert not reserve.release()
    assert reserve.keep() and (tmp_path / RESERVE_FILE).exists()


def test_no_reserve_when_its_size_is_0(tmp_path: Path) -> None:
    assert not Reserve(tmp_path, 0, 1024).keep()
    assert not (tmp_path / RESERVE_FILE).exists()


def test_on_a_pool_what_the_nodes_hold_is_added_and_a_node_walks_only_what_it_has(
    tmp_path: Path,
) -> None:
    """The server's own copies (logs) plus what each node's agent found of the same jobs
    and workspaces on its disk; a node lists its directories once, and walks only the jobs
    and users it has."""
    settings = Settings(data_dir=tmp_path / "server")
    write(settings.jobs_dir / "1" / "attempts" / "1" / "output.log", MIB)  # the server's copy
    node_a = FilesScan(tmp_path / "a" / "jobs", tmp_path / "a" / "workspaces")
    node_b = FilesScan(tmp_path / "b" / "jobs", tmp_path / "b" / "workspaces")
    write(tmp_path / "a" / "jobs" / "1" / "outputs" / "w.bin", 2 * MIB)
    write(tmp_path / "b" / "jobs" / "1" / "outputs" / "w.bin", 3 * MIB)  # a gang: both nodes
    write(tmp_path / "b" / "workspaces" / "ann" / "nb.ipynb", MIB)
    write(tmp_path / "b" / "jobs" / "9" / "outputs" / "other.bin", 4 * MIB)  # not asked about
    asked: list[tuple[dict[int, bool], set[str]]] = []

    def nodes(jobs: dict[int, bool], users: set[str]) -> NodeFiles:
        asked.append((jobs, users))
        found = NodeFiles()
        for node in (node_a, node_b):
            found.add(NodeFiles.from_json(node.measure(jobs, users).to_json()))  # as sent
        return found

    [usage] = StorageScan(settings, nodes).measure([team({1: False}, ("ann",))])

    assert asked == [({1: False}, {"ann"})]
    assert 7 * MIB <= usage.used < 7 * MIB + 256 * 1024
    assert 6 * MIB <= usage.running < 6 * MIB + 256 * 1024
    assert node_a.measure({2: True}, {"bob"}).to_json() == {"jobs": {}, "workspaces": {}}
