"""Debian's chromium driven by Playwright, for the browser tests (marker ``browser``).

A test module takes ``pytestmark = NEEDS_CHROMIUM`` and a ``browser`` fixture built on
``launched()``; without chromium or Playwright the module skips, saying which is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess

CHROMIUM = Path("/usr/bin/chromium")
NEEDS_CHROMIUM = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]
SLOW = 30_000  # ms: an upper bound for what a loaded machine may take, never a pace


@contextmanager
def launched() -> Iterator[object]:
    """A headless chromium, closed on exit."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        yield browser
        browser.close()


def sign_in(page, server: ServerProcess, target: str = "/") -> None:  # noqa: ANN001
    """Sign in as the server's admin through the login page, landing on ``target``."""
    expect = pytest.importorskip("playwright.sync_api").expect
    page.goto(f"/login?next={target}")
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill(server.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(re.escape(server.url + target) + "$"), timeout=SLOW)


def call_api(server: ServerProcess, method: str, path: str, body: dict | None = None) -> dict:
    """A set-up or check call of the REST API as the server's admin, which must succeed."""
    headers = {"Authorization": f"Bearer {server.token}"}
    answer = httpx.request(
        method, f"{server.url}/api/v1{path}", json=body, headers=headers, timeout=10
    )
    assert answer.status_code < 300, answer.text
    return answer.json()
