"""The submit form's shared memory, processes per node and hold, and the job page's Hold and
Release buttons, in a real browser on a real server of one machine (4 declared A100)."""

from __future__ import annotations

import re

import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW, sign_in
from tests.support.chromium import call_api as api
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
expect = pytest.importorskip("playwright.sync_api").expect


def test_the_form_sends_shared_memory_processes_per_node_and_hold(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    sign_in(page, server, "/jobs/new")
    page.get_by_label("Command").fill("sleep 60")
    page.get_by_label("Memory (optional)", exact=True).fill("256MiB")
    page.get_by_label("Shared memory").fill("1GiB")
    page.get_by_role("button", name="Submit job").click()
    # the server's word, under the field it is about
    expect(page.locator("#shm-error")).to_contain_text("larger than the job's memory", timeout=SLOW)

    page.get_by_label("Shared memory").fill("64MiB")
    page.get_by_label("Processes per node").fill("2")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#procs_per_node-error")).to_contain_text("with a launcher")

    page.get_by_label("GPUs").fill("2")
    page.get_by_label("Launcher").select_option("torch")
    page.get_by_label("Hold:").check()
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    job_id = page.url.rsplit("/", 1)[1]
    job = api(server, "GET", f"/jobs/{job_id}")
    spec = job["spec"]
    assert (spec["shm_bytes"], spec["procs_per_node"], spec["hold"]) == (64 * 1024**2, 2, True)
    assert (job["status"], job["reason"]) == ("pending", "Held")
    expect(page.get_by_role("button", name="Release")).to_be_visible(timeout=SLOW)
    expect(page.get_by_role("button", name="Hold", exact=True)).to_be_hidden()

    page.get_by_role("link", name="Submit again…").click()
    expect(page.get_by_label("Shared memory")).to_have_value("64MiB", timeout=SLOW)
    expect(page.get_by_label("Processes per node")).to_have_value("2")
    expect(page.get_by_label("Hold:")).to_be_checked()
    api(server, "POST", f"/jobs/{job_id}/cancel")


def test_the_job_page_holds_and_releases_a_pending_job(page, server: ServerProcess) -> None:  # noqa: ANN001
    first = api(server, "POST", "/jobs", {"command": ["sleep", "60"]})["id"]
    waiting = api(server, "POST", "/jobs", {"command": ["true"], "depends_on": [str(first)]})
    sign_in(page, server, f"/jobs/{waiting['id']}")
    release = page.get_by_role("button", name="Release")
    hold = page.get_by_role("button", name="Hold", exact=True)
    expect(release).to_be_hidden()

    hold.click()
    expect(release).to_be_visible(timeout=SLOW)
    expect(hold).to_be_hidden()
    assert api(server, "GET", f"/jobs/{waiting['id']}")["reason"] == "Held"

    release.click()
    expect(hold).to_be_visible(timeout=SLOW)
    expect(release).to_be_hidden()
    assert api(server, "GET", f"/jobs/{waiting['id']}")["reason"] == "Dependency"
    api(server, "POST", f"/jobs/{first}/cancel")
