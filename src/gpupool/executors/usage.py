"""What the teams' files take on a node's disk: its jobs' directories and its workspaces.

One machine's server walks its own data directory (the storage scan of
``services.scheduling``); on a pool, each node's agent walks its own for the server, which
adds them up (``NodeFiles``). A finished job's directory no longer changes: its size is
kept, so that it is walked once.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class NodeFiles:
    """What jobs' directories (by job id) and users' workspaces (by user name) take on the
    nodes that answered; only the ones found, so a missing id means nothing there."""

    jobs: dict[int, int] = field(default_factory=dict)
    workspaces: dict[str, int] = field(default_factory=dict)

    def add(self, other: NodeFiles) -> None:
        for job_id, size in other.jobs.items():
            self.jobs[job_id] = self.jobs.get(job_id, 0) + size
        for user, size in other.workspaces.items():
            self.workspaces[user] = self.workspaces.get(user, 0) + size

    def to_json(self) -> dict[str, dict[str, int]]:
        return {
            "jobs": {str(job_id): size for job_id, size in self.jobs.items()},
            "workspaces": dict(self.workspaces),
        }

    @classmethod
    def from_json(cls, data: dict[str, dict[str, int]]) -> NodeFiles:
        jobs = {int(job_id): int(size) for job_id, size in (data.get("jobs") or {}).items()}
        spaces = {str(user): int(size) for user, size in (data.get("workspaces") or {}).items()}
        return cls(jobs, spaces)


class FilesScan:
    """Sums job directories under ``jobs_dir`` and workspaces under ``workspaces_dir``,
    keeping each finished job's size."""

    def __init__(self, jobs_dir: Path, workspaces_dir: Path) -> None:
        self.jobs_dir, self.workspaces_dir = Path(jobs_dir), Path(workspaces_dir)
        self._finished: dict[int, int] = {}

    def job_bytes(self, job_id: int, finished: bool) -> int:
        if job_id in self._finished:
            return self._finished[job_id]
        size = tree_bytes(self.jobs_dir / str(job_id))
        if finished:
            self._finished[job_id] = size
        return size

    def workspace_bytes(self, user: str) -> int:
        return tree_bytes(self.workspaces_dir / user)

    def measure(self, jobs: dict[int, bool], users: Iterable[str]) -> NodeFiles:
        """The jobs (id -> finished) and users asked about that have files here."""
        found = NodeFiles()
        present = _names(self.jobs_dir)
        for job_id, finished in jobs.items():
            if str(job_id) in present and (size := self.job_bytes(job_id, finished)):
                found.jobs[job_id] = size
        spaces = _names(self.workspaces_dir)
        for user in users:
            if user in spaces and (size := self.workspace_bytes(user)):
                found.workspaces[user] = size
        return found


def tree_bytes(root: Path) -> int:
    """The bytes ``root`` takes on disk, as ``du`` counts them (0 when it is missing);
    symbolic links are not followed, a file linked several times counts once."""
    total, seen, todo = 0, set(), [str(root)]
    while todo:
        path = todo.pop()
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                todo.append(entry.path)
    return total


def _names(directory: Path) -> set[str]:
    """The entries of ``directory`` (none when it is missing): one listing, rather than a
    failed walk per job that never ran on this node."""
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()
