"""The queue and teams pages in a real browser (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
SLOW = 30_000  # ms: an upper bound for what a loaded machine may take, never a pace
SHOTS = Path("/tmp")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser, server: ServerProcess) -> Iterator[object]:  # noqa: ANN001
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


def sign_in(page, server: ServerProcess, target: str = "/") -> None:  # noqa: ANN001
    page.goto(f"/login?next={target}")
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill(server.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(re.escape(server.url + target) + "$"), timeout=SLOW)


def api_submit(server: ServerProcess, **spec: object) -> int:
    body = {"command": ["sleep", "300"]} | spec
    headers = {"Authorization": f"Bearer {server.token}"}
    answer = httpx.post(f"{server.url}/api/v1/jobs", json=body, headers=headers, timeout=10)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_the_queue_explains_waiting_jobs_and_the_teams_page_draws_charts(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    sign_in(page, server, "/queue")
    expect(page.get_by_role("heading", name="No job is waiting")).to_be_visible()

    holder = api_submit(server, name="holder", resources={"gpus": 4}, max_runtime_seconds=3600)
    waiting = api_submit(server, name="waiter", resources={"gpus": 2}, max_runtime_seconds=600)
    row = page.locator(f"tr[data-id='{waiting}']")
    expect(row).to_contain_text("InsufficientGpus", timeout=SLOW)  # the page polls every 5 s
    expect(row.locator("td.position")).to_have_text("#1", timeout=SLOW)
    expect(row).to_contain_text("about", timeout=SLOW)
    expect(page.locator(f"tr[data-id='{holder}']")).to_have_count(0)
    expect(page.locator("#queue-summary")).to_contain_text("1 job waiting in 1 team")
    page.get_by_text("How start times are estimated").click()
    expect(page.locator("#assumptions")).to_contain_text("no new job is submitted")
    page.screenshot(path=str(SHOTS / "ui-queue.png"), full_page=True)

    row.get_by_role("link", name=f"#{waiting}").click()
    expect(page).to_have_url(f"{server.url}/jobs/{waiting}")
    why = page.locator("#why")
    expect(why).to_be_visible()
    expect(why).to_contain_text("Why is it waiting?")
    expect(page.locator("#why-eta")).to_contain_text("about", timeout=SLOW)
    expect(page.locator("#why-position")).to_contain_text("#1 in team default's queue")
    page.screenshot(path=str(SHOTS / "ui-why.png"), full_page=True)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Teams").click()
    expect(page).to_have_url(f"{server.url}/teams")
    team = page.locator("section.team[data-team='default']")
    expect(team).to_contain_text("In use now")
    chart = team.locator("svg.team-chart")
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert box["width"] > 300 and box["height"] > 100, box
    held = chart.locator("polyline.series-held")
    assert len(held.get_attribute("points").split()) == 49, "48 periods and now"
    assert held.evaluate("line => line.getTotalLength()") > 100, "the line is drawn"
    stroke = held.evaluate("line => getComputedStyle(line).stroke")
    assert stroke not in ("none", ""), "the stylesheet colours the line"
    expect(page.locator(".legend")).to_contain_text("Fair share")
    page.get_by_label("Period").select_option("6")
    page.get_by_role("button", name="Show").click()
    expect(page).to_have_url(f"{server.url}/teams?hours=6")
    expect(page.get_by_label("Period")).to_have_value("6")
    page.screenshot(path=str(SHOTS / "ui-teams.png"), full_page=True)
