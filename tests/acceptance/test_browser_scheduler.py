"""The scheduler settings page in a real browser on a real server: an admin changes knobs
with the form (durations with units, only the knobs edited are sent), sees a mistake said
under the form, reads the history and rolls back to the environment's settings; a member
reads the live settings without the form or the history."""

from __future__ import annotations

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW, call_api, sign_in
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
expect = pytest.importorskip("playwright.sync_api").expect


def config(server: ServerProcess) -> dict:
    return call_api(server, "GET", "/scheduler/config")


def test_an_admin_changes_the_settings_and_rolls_them_back_from_the_page(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    sign_in(page, server, "/scheduler")
    expect(page.locator("#live-version")).to_have_text("version 0")
    page.get_by_label("las_thresholds").fill("1h, 20h, soon")
    page.get_by_label("Why this change").fill("mid-sized jobs were preempted too often")
    page.get_by_role("button", name="Make a new version").click()
    expect(page.locator("#change-error")).to_contain_text("not a duration")

    page.get_by_label("las_thresholds").fill("1h, 20h, 200h")
    page.get_by_label("min_runtime").fill("10m")
    page.get_by_role("button", name="Make a new version").click()

    expect(page.locator("#live-version")).to_have_text("version 1", timeout=SLOW)
    row = page.locator('#knobs tr[data-knob="las_thresholds"] .knob-value')
    expect(row).to_have_text("1h, 20h, 200h GPU")
    live = config(server)
    assert live["knobs"]["las_thresholds"] == [3600.0, 72000.0, 720000.0]
    assert live["knobs"]["min_runtime"] == 600.0
    assert live["live"]["changed"] == ["las_thresholds", "min_runtime"], "only what was edited"
    history = page.locator('#history tr[data-version="1"]')
    expect(history).to_contain_text("mid-sized jobs were preempted too often")

    page.get_by_role("button", name="Roll back to 0").click()
    expect(page.locator("#rollback-error")).to_contain_text("Say why")
    page.get_by_label("Why roll back").fill("back to the defaults")
    page.get_by_role("button", name="Roll back to 0").click()
    expect(page.locator("#live-version")).to_have_text("version 2", timeout=SLOW)
    expect(page.locator("#live-line")).to_contain_text("rollback to version 0")
    assert config(server)["knobs"] == config(server)["environment"]
    expect(page.locator("#tunes")).to_contain_text("No tuning yet")
    body = {"window": 7200, "holdout": 3600}  # a dry run on a history of no job: refused
    asked = call_api(server, "POST", "/scheduler/tunes", body)
    row = page.locator(f'#tunes tr[data-tune="{asked["id"]}"]')
    for _ in range(20):  # the tuning watch ends it within a look or two
        page.reload()
        if "refuse" in (row.text_content(timeout=SLOW) or ""):
            break
        page.wait_for_timeout(500)
    expect(row).to_contain_text("no history to tune on")


def test_a_member_reads_the_live_settings_without_the_form(server: ServerProcess) -> None:
    admin = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=10) as client:
        made = client.post("/api/v1/users", json={"name": "mia", "teams": ["default"]})
        assert made.status_code == 201, made.text
        token = client.post("/api/v1/tokens", json={"name": "t", "user": "mia"}).json()["token"]
    with httpx.Client(base_url=server.url, timeout=10) as client:
        signed = client.post("/api/v1/session", json={"user": "mia", "password": token})
        assert signed.status_code == 200, signed.text
        html = client.get("/scheduler").text
    assert 'data-knob="las_thresholds"' in html and "30m, 10h, 100h GPU" in html
    assert 'id="change-form"' not in html and 'id="history"' not in html
    assert 'href="/scheduler"' not in html, "the menu links it for admins only"
