"""Fixtures of the acceptance tests that drive the real CLI against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server (4 declared A100s) per test module: each test ends the jobs it starts."""
    process = ServerProcess(tmp_path_factory.mktemp("cli") / "data").start()
    yield process
    process.stop()


@pytest.fixture
def admin(pool: ServerProcess) -> Cli:
    """The CLI as the pool's first admin (GPUPOOL_URL + GPUPOOL_TOKEN)."""
    assert pool.token
    return Cli(pool.url, pool.token)


@pytest.fixture
def release(exchange: Path) -> Iterator[Path]:
    """A marker file; held jobs (see ``hold``) end once it exists, at the latest at teardown.
    It lies in ``exchange``, which a held job must have as its working directory (``--workdir``)
    to see it."""
    marker = exchange / "release"
    yield marker
    marker.touch()
