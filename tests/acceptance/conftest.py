"""Fixtures of the acceptance tests that drive the real CLI against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chromium import launched
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


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One chromium per test module (Playwright's; the modules skip without chromium)."""
    with launched() as chromium:
        yield chromium


@pytest.fixture
def page(browser, server: ServerProcess) -> Iterator[object]:  # noqa: ANN001
    """A fresh page on the test's server; the test fails on any JavaScript error."""
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
