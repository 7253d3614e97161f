"""Job dependencies in a real browser (Debian's chromium, driven by Playwright) on a real
server: the submit form's "Runs after" field sends depends_on, a job it does not know is
shown at the field, and the job page says what the job runs after and why it waits."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW, sign_in
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


def test_the_form_submits_a_job_that_runs_after_another(page, server: ServerProcess) -> None:  # noqa: ANN001
    headers = {"Authorization": f"Bearer {server.token}"}
    body = {"command": ["sleep", "300"], "name": "form-prep"}
    prep = httpx.post(f"{server.url}/api/v1/jobs", json=body, headers=headers).json()["id"]
    sign_in(page, server, "/jobs/new")
    page.get_by_label("Command").fill("true")
    page.get_by_label("Runs after").fill("no-such-job")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#after-error")).to_contain_text(
        "no job of this team is named 'no-such-job'"
    )
    page.get_by_label("Runs after").fill(f"form-prep, afterany:{prep}")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#after-error")).to_contain_text("twice")
    page.get_by_label("Runs after").fill(f"afterany:{prep}")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    job_id = page.url.rsplit("/", 1)[1]
    spec = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers).json()["spec"]
    assert spec["depends_on"] == [{"job": prep, "condition": "afterany"}]
    expect(page.locator("#spec-after")).to_contain_text(f"job {prep} has ended (afterany)")
    expect(page.get_by_text(f"waits for job {prep} (form-prep) to end").first).to_be_visible()
    page.goto(f"/jobs/new?again={job_id}")
    expect(page.get_by_label("Runs after")).to_have_value(f"afterany:{prep}")
    httpx.post(f"{server.url}/api/v1/jobs/{prep}/cancel", headers=headers)
