"""The model registry's pages in a real browser (Debian's chromium, driven by Playwright) on a
real server: from the top bar to a model, its versions, a version's files and metrics, and on
to the job the version came from."""

from __future__ import annotations

import hashlib
import re

import httpx
import pytest

import gpupool
from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.cli import FINAL, wait_for
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

WRITE = 'mkdir -p "$GPUPOOL_OUTPUT_DIR/m" && printf abc > "$GPUPOOL_OUTPUT_DIR/m/weights.bin"'


def registered(pool: ServerProcess) -> int:
    """A job that wrote a file, ended, and was registered twice as 'digits'."""
    with httpx.Client(
        base_url=f"{pool.url}/api/v1", headers={"Authorization": f"Bearer {pool.token}"}
    ) as api:
        job_id = api.post("/jobs", json={"command": ["sh", "-c", WRITE]}).json()["id"]
        wait_for(lambda: api.get(f"/jobs/{job_id}").json()["status"] in FINAL, what="the job")
        for _ in range(2):
            answer = api.post("/models/digits/versions", json={"job_id": job_id, "path": "m"})
            assert answer.status_code == 201, answer.text
    return job_id


def test_from_the_top_bar_to_a_versions_files_and_its_source_job(
    pool: ServerProcess,
    browser,  # noqa: ANN001
) -> None:
    job_id = registered(pool)
    context = browser.new_context(base_url=pool.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto("/login?next=/")
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill(pool.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/$"), timeout=SLOW)

    page.get_by_role("link", name="Models").click()
    page.get_by_role("link", name="digits").click()

    expect(page).to_have_url(re.compile(r"/models/default/digits$"))
    expect(page.locator(".versions-table tbody tr")).to_have_count(2)
    expect(page.locator("#version-title")).to_have_text("digits:2")
    files = page.locator(".files-table")
    expect(files).to_contain_text("weights.bin")
    expect(files).to_contain_text(hashlib.sha256(b"abc").hexdigest())
    # the footer names gpupool's version, not the shown model version's record
    expect(page.locator("footer.footer")).to_have_text(f"gpupool {gpupool.__version__} · REST API")
    page.get_by_role("link", name="digits:1").click()
    expect(page.locator("#version-title")).to_have_text("digits:1")
    page.locator("#source-job").click()
    expect(page).to_have_url(re.compile(rf"/jobs/{job_id}$"))
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
