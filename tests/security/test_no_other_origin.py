"""Every page of the web UI works with nothing but its own server: in a real browser
(Debian's chromium, driven by Playwright) whose requests to any other origin are aborted, a
signed-in user visits each page; none asks for anything elsewhere, none breaks the
Content-Security-Policy, and each loads all its assets and logs no error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW, launched
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
ASSETS = {"document", "stylesheet", "script", "image", "font", "media", "manifest"}
# What a page fetches once its script runs (its first poll): waiting for it lets what the
# script does show up; None: the page's script fetches nothing by itself.
PAGES = {
    "/": "/api/v1/pool",
    "/jobs": "/api/v1/jobs",
    "/jobs/new": None,
    "/jobs/{job}": "/api/v1/jobs/{job}",
    "/queue": "/api/v1/jobs/queue",
    "/teams": None,
    "/notebooks": None,
    "/api/v1/docs": "/api/v1/openapi.json",
}
# The one refusal a page asks for on purpose: the sign-in page asks whether its visitor is
# signed in already.
EXPECTED_REFUSALS = {("/login", "/api/v1/whoami", 401)}
# Records the page's CSP violations where the test can read them (an init script is
# injected by the browser's debugging protocol, so the page's CSP does not apply to it).
WATCH_CSP = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(`${e.violatedDirective} blocked ${e.blockedURI}`));
"""


class Watch:
    """What the browser did, page by page: requests elsewhere, refusals, failures, errors."""

    def __init__(self, server: ServerProcess) -> None:
        self.origin = server.url
        self.at = ""  # the page being visited
        self.outside: list[str] = []
        self.passed: set[str] = set()  # same-origin documents the route let through
        self.problems: list[str] = []

    def route(self, route) -> None:  # noqa: ANN001 - a Playwright Route
        """Let requests to the server through; abort any other (and note it)."""
        url = route.request.url
        if url.startswith(self.origin + "/"):
            if route.request.resource_type == "document":
                self.passed.add(urlsplit(url).path)
            route.continue_()
        else:
            self.outside.append(f"{self.at}: {url}")
            route.abort()

    def request(self, request) -> None:  # noqa: ANN001
        parts = urlsplit(request.url)
        if parts.scheme in {"http", "https", "ws", "wss"} and parts.hostname != "127.0.0.1":
            self.outside.append(f"{self.at}: {request.url}")

    def response(self, response) -> None:  # noqa: ANN001
        parts, status = urlsplit(response.url), response.status
        if not response.url.startswith(self.origin + "/") or status < 400:
            return
        kind = response.request.resource_type
        if (self.at, parts.path, status) in EXPECTED_REFUSALS and kind not in ASSETS:
            return
        self.problems.append(f"{self.at}: {status} for {kind} {parts.path}")

    def failed(self, request) -> None:  # noqa: ANN001
        if request.url.startswith(self.origin + "/") and request.resource_type in ASSETS:
            self.problems.append(f"{self.at}: {request.url} failed: {request.failure}")

    def console(self, message) -> None:  # noqa: ANN001
        # a refused resource logs "Failed to load resource": response() judges those
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.problems.append(f"{self.at}: console error: {message.text}")

    def page_error(self, error) -> None:  # noqa: ANN001
        self.problems.append(f"{self.at}: script error: {error}")


@pytest.fixture
def browser() -> Iterator[object]:
    with launched() as chromium:
        yield chromium


def test_no_page_reaches_outside_the_server(browser, server: ServerProcess) -> None:  # noqa: ANN001
    job = _submit(server)
    context = browser.new_context(base_url=server.url)
    watch = Watch(server)
    context.route("**/*", watch.route)
    context.add_init_script(WATCH_CSP)
    page = context.new_page()
    for event, handler in (
        ("request", watch.request),
        ("response", watch.response),
        ("requestfailed", watch.failed),
        ("console", watch.console),
        ("pageerror", watch.page_error),
    ):
        page.on(event, handler)

    _visit(page, watch, "/login", None)
    _sign_in(page, server)
    for path, fetched in PAGES.items():
        shown = path.format(job=job)
        _visit(page, watch, shown, fetched and fetched.format(job=job))
    context.close()

    assert watch.outside == [], "pages asked for something outside the server"
    assert watch.problems == [], "pages broke their CSP, failed to load assets or logged errors"
    visited = {"/login", *(path.format(job=job) for path in PAGES)}
    assert visited <= watch.passed, "the test's route did not see every page it visited"


def _visit(page, watch: Watch, path: str, fetched: str | None) -> None:  # noqa: ANN001
    """Open a page, wait for its script's first fetch (if it makes one), note violations."""
    watch.at = path
    if fetched is None:
        answer = page.goto(path, wait_until="load")
    else:
        with page.expect_response(lambda r: urlsplit(r.url).path == fetched, timeout=SLOW):
            answer = page.goto(path, wait_until="load")
    assert answer is not None and answer.status == 200, f"{path}: {answer and answer.status}"
    for violation in page.evaluate("window.__violations"):
        watch.problems.append(f"{path}: CSP violation: {violation}")


def _sign_in(page, server: ServerProcess) -> None:  # noqa: ANN001
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill(server.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(re.escape(server.url) + "/$"), timeout=SLOW)
    # let the page the sign-in opened finish loading: a goto while its assets still load
    # aborts them (net::ERR_ABORTED), which is the test's doing, not the page's
    page.wait_for_load_state("load", timeout=SLOW)


def _submit(server: ServerProcess) -> int:
    """A job, for a job page to show."""
    headers = {"Authorization": f"Bearer {server.token}"}
    body = {"command": ["sleep", "300"], "name": "no-other-origin"}
    answer = httpx.post(f"{server.url}/api/v1/jobs", json=body, headers=headers, timeout=10)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]
