"""Fixtures of the executor tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.executors.local import LocalExecutor
from tests.unit.executors.executor_helpers import kill_leftovers


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "jobs"
    yield path
    kill_leftovers(path)


@pytest.fixture
def executor(jobs_dir: Path) -> LocalExecutor:
    return LocalExecutor(jobs_dir)
