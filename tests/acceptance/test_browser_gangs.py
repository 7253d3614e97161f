"""Jobs over several nodes in a real browser on a real server of one machine: the submit form
sends nodes and a launcher, the job page says what the job asks for, and a log whose lines
carry rank prefixes gets a picker that shows one rank's lines."""

from __future__ import annotations

import re
import sys

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW, sign_in
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
expect = pytest.importorskip("playwright.sync_api").expect


def api_submit(server: ServerProcess, command: list[str]) -> int:
    headers = {"Authorization": f"Bearer {server.token}"}
    body = {"command": command}
    answer = httpx.post(f"{server.url}/api/v1/jobs", json=body, headers=headers, timeout=10)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


LINES = "[rank 0] a\n[rank 1] b\n[task 1] c\n[rank 0] d\n[rank 1] e\n"


def test_the_rank_picker_shows_one_rank_s_lines(page, server: ServerProcess) -> None:  # noqa: ANN001
    job_id = api_submit(server, command=[sys.executable, "-c", f"print({LINES!r}, end='')"])
    sign_in(page, server, f"/jobs/{job_id}")
    log = page.locator("#log")
    expect(page.locator("#log-state")).to_contain_text("End of output", timeout=SLOW)
    assert log.text_content() == LINES
    picker = page.get_by_label("Lines of")
    expect(picker).to_be_visible()
    options = picker.locator("option").all_text_contents()
    assert options == ["all ranks", "rank 0", "rank 1", "task 1"]

    picker.select_option("rank 1")
    expect(log).to_have_text("b\ne\n", timeout=SLOW)
    picker.select_option("task 1")
    expect(log).to_have_text("c\n", timeout=SLOW)
    picker.select_option("")
    expect(log).to_have_text(LINES, timeout=SLOW)


def test_a_plain_log_has_no_rank_picker(page, server: ServerProcess) -> None:  # noqa: ANN001
    job_id = api_submit(server, command=["echo", "[not a rank] hello"])
    sign_in(page, server, f"/jobs/{job_id}")
    expect(page.locator("#log")).to_contain_text("hello", timeout=SLOW)
    expect(page.locator("#log-state")).to_contain_text("End of output", timeout=SLOW)
    expect(page.locator("#log-lines-choice")).to_be_hidden()


def test_the_form_sends_nodes_and_a_launcher_and_the_page_says_so(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    sign_in(page, server, "/jobs/new")
    page.get_by_label("Command").fill("python train.py")
    page.get_by_label("GPUs").fill("0.5")
    page.get_by_label("Nodes").fill("2")
    page.get_by_label("Launcher").select_option("mpi")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#launcher-error")).to_contain_text("whole GPUs, not 0.5", timeout=SLOW)

    page.get_by_label("GPUs").fill("2")
    page.get_by_label("Launcher").select_option("torchrun")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    expect(page.locator("#spec-nodes")).to_have_text("2 nodes × 2 GPUs (4 GPUs in all)")
    expect(page.locator("#spec-launcher")).to_have_text("torch, one torchrun per node")
    job_id = page.url.rsplit("/", 1)[1]
    headers = {"Authorization": f"Bearer {server.token}"}
    spec = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers).json()["spec"]
    assert (spec["nodes"], spec["launcher"], spec["launcher_mode"]) == (2, "torch", "torchrun")
    page.goto("/jobs")
    row = page.locator(f'tr[data-id="{job_id}"]')
    expect(row).to_contain_text("2 nodes × 2 GPUs · torch")
    httpx.post(f"{server.url}/api/v1/jobs/{job_id}/cancel", headers=headers)
