"""The API docs page works offline: in a real browser (Debian's chromium, driven by
Playwright) that may reach nothing but the server, under the UI's Content-Security-Policy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpupool.api.ui import CSP
from tests.support.chromium import NEEDS_CHROMIUM, SLOW, launched
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


@pytest.fixture
def browser() -> Iterator[object]:
    with launched() as chromium:
        yield chromium


def test_the_api_docs_render_with_nothing_but_the_server(browser, server: ServerProcess) -> None:  # noqa: ANN001
    context = browser.new_context(base_url=server.url)
    outside: list[str] = []

    def only_the_server(route) -> None:  # noqa: ANN001
        if route.request.url.startswith(server.url + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_server)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    answer = page.goto("/api/v1/docs")
    assert answer.headers["content-security-policy"] == CSP
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/jobs").first).to_be_visible(
        timeout=SLOW
    )
    assert page.locator(".opblock").count() > 10  # every operation, not an error box
    page.locator(".opblock-summary", has_text="/api/v1/whoami").first.click()
    expect(page.locator(".opblock-body").first).to_be_visible(timeout=SLOW)
    context.close()
    assert outside == [], "the docs page asked for something outside the server"
    assert problems == [], "errors in the page (a CSP refusal shows here)"
