"""Debian's chromium driven by Playwright, for the browser tests (marker ``browser``).

A test module takes ``pytestmark = NEEDS_CHROMIUM`` and a ``browser`` fixture built on
``launched()``; without chromium or Playwright the module skips, saying which is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

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
