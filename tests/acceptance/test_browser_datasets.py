"""Datasets and volumes in a real browser (Debian's chromium, driven by Playwright) on a real
server: from the top bar to a dataset, its versions and files; then the submit form picks it,
and the job reads it where it was mounted."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.cli import Cli
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


def test_from_the_top_bar_to_a_versions_files_then_a_job_that_reads_it(
    pool: ServerProcess,
    admin: Cli,
    browser,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    source = tmp_path / "digits"
    (source / "train").mkdir(parents=True)
    (source / "train" / "a.csv").write_text("1,2\n")
    admin.ok("dataset", "create", "digits", "--from", str(source))
    (source / "train" / "b.csv").write_text("3,4\n")
    admin.ok("dataset", "create", "digits", "--from", str(source))
    admin.ok("volume", "create", "scratch")

    context = browser.new_context(base_url=pool.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto("/login?next=/")
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill(pool.token or "")
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/$"), timeout=SLOW)

    page.get_by_role("link", name="Datasets").click()
    expect(page.locator("#volume-rows tr[data-name='scratch']")).to_contain_text("default")
    page.locator("#dataset-rows tr[data-name='digits']").get_by_role("link").click()
    expect(page).to_have_url(re.compile(r"/datasets/default/digits$"))
    expect(page.locator(".versions-table tbody tr")).to_have_count(2)
    expect(page.locator("#version-title")).to_have_text("digits:2")
    files = page.locator(".files-table")
    expect(files).to_contain_text("train/b.csv")
    expect(files).to_contain_text(hashlib.sha256(b"3,4\n").hexdigest())
    page.get_by_role("link", name="digits:1").click()
    expect(page.locator(".files-table tbody tr")).to_have_count(1)
    page.goto("/datasets/default/nothing")
    expect(page.get_by_role("heading", level=1)).to_have_text("No dataset nothing")

    page.goto("/jobs/new")
    page.get_by_label("Command").fill("cat /datasets/digits/train/b.csv")
    page.get_by_label("Datasets").select_option(["digits"])
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    expect(page.locator("#status-line")).to_contain_text("succeeded", timeout=2 * SLOW)
    expect(page.locator("#log")).to_contain_text("3,4", timeout=SLOW)
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
