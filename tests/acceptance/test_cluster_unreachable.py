"""A pool's server whose Ray cluster does not answer, as users meet it: ``gpupool nodes``
warns, jobs are accepted and wait, and every page of the web UI shows a banner (none on one
machine). The server is attached (``--ray-address``) to an address where nothing listens,
so these tests need no Ray; tests/cluster/test_head_loss.py kills a real head."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

import gpupool
from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.cli import Cli
from tests.support.server import ServerProcess, free_port

BANNER = "The pool's Ray cluster does not answer."
LOOKED_TWICE = "() => performance.getEntriesByName(location.origin + '/api/v1/health').length >= 2"


@pytest.fixture(scope="module")
def headless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server in Ray mode whose cluster's head is nowhere."""
    address = f"127.0.0.1:{free_port()}"
    data_dir = tmp_path_factory.mktemp("headless") / "data"
    process = ServerProcess(data_dir, args=["--ray-address", address]).start()
    yield process
    process.stop()


def test_nodes_warns_and_a_job_is_accepted_and_waits(headless: ServerProcess) -> None:
    cli = Cli(headless.url, headless.token)
    listed = cli("nodes")
    assert listed.returncode == 0, listed.stderr
    warning = [line for line in listed.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1, listed.stderr
    assert "the Ray cluster at 127.0.0.1:" in warning[0] and "is unreachable" in warning[0]
    assert "jobs are accepted and wait in the queue" in warning[0]
    job_id = cli.submit("--gpus", "1", "--", "true")
    assert cli.job(job_id)["status"] == "pending"


def needs_chromium(test: Callable[..., None]) -> Callable[..., None]:
    for mark in NEEDS_CHROMIUM:
        test = mark(test)
    return test


@needs_chromium
def test_every_page_shows_the_banner(browser, headless: ServerProcess) -> None:  # noqa: ANN001
    expect = pytest.importorskip("playwright.sync_api").expect
    context = browser.new_context(base_url=headless.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto("/login?next=/jobs")
    expect(page.get_by_role("status").filter(has_text=BANNER)).to_be_visible(timeout=SLOW)
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill(headless.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(re.escape(headless.url) + "/jobs$"), timeout=SLOW)
    for path in ("/jobs", "/", "/queue", "/jobs/new"):
        page.goto(path)
        banner = page.locator("#cluster-banner")
        expect(banner).to_be_visible(timeout=SLOW)
        expect(banner).to_contain_text("jobs are accepted and wait in the queue")
    context.close()
    assert not errors, errors


@needs_chromium
def test_one_machine_shows_no_banner(page, server: ServerProcess) -> None:  # noqa: ANN001
    expect = pytest.importorskip("playwright.sync_api").expect
    with page.expect_response(re.compile(r"/api/v1/health$")) as looked:
        page.goto("/login")
    assert looked.value.json() == {"status": "ok", "version": gpupool.__version__}
    # the page looks again only once it has applied the first answer
    page.wait_for_function(LOOKED_TWICE, timeout=SLOW)
    expect(page.locator("#cluster-banner")).to_be_hidden()
