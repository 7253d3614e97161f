"""Fixtures of the web UI tests (test_ui*.py): one real server per module, a signed-in admin."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server (4 declared A100s) started once per test module, unlike the per-test
    ``server`` of tests/conftest.py: UI tests read pages and make their own jobs, so they can
    share it (and run in seconds, not minutes)."""
    process = ServerProcess(tmp_path_factory.mktemp("ui") / "data").start()
    yield process
    process.stop()


@pytest.fixture
def admin(ui_server: ServerProcess) -> Iterator[tuple[httpx.Client, str]]:
    """A browser-like client signed in as the admin (its token as the password), and its CSRF."""
    with httpx.Client(base_url=ui_server.url, timeout=10) as client:
        password = ui_server.token
        answer = client.post("/api/v1/session", json={"user": "admin", "password": password})
        assert answer.status_code == 200, answer.text
        yield client, answer.json()["csrf_token"]
