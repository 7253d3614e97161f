"""Python environments in a real browser (Debian's chromium, driven by Playwright) on a real
server: from the top bar to an environment, its versions and packages; then the submit form
picks it, and the job runs in it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.server import ServerProcess
from tests.support.wheels import index_env, wheelhouse

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    wheels = wheelhouse(tmp_path_factory.mktemp("wheels"))
    data = tmp_path_factory.mktemp("env-pages") / "data"
    process = ServerProcess(data, env=index_env(wheels)).start()
    yield process
    process.stop()


def made(pool: ServerProcess, name: str, requirements: str) -> dict:
    headers = {"Authorization": f"Bearer {pool.token}"}
    body = {"name": name, "requirements": requirements, "description": "for the pages"}
    answer = httpx.post(f"{pool.url}/api/v1/environments", json=body, headers=headers, timeout=120)
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_from_the_top_bar_to_its_packages_then_a_job_picked_in_the_form(
    pool: ServerProcess,
    browser,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    old = made(pool, "tools", "alpha<2\n")
    new = made(pool, "tools", "beta\n")
    context = browser.new_context(base_url=pool.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto("/login?next=/")
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password or API token").fill(pool.token or "")
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/$"), timeout=SLOW)

    page.get_by_role("link", name="Environments").click()
    row = page.locator("#environment-rows tr[data-name='tools']")
    expect(row).to_contain_text(new["short_id"])
    row.get_by_role("link", name="tools").click()
    expect(page).to_have_url(re.compile(r"/environments/default/tools$"))
    expect(page.locator(".versions-table tbody tr")).to_have_count(2)
    expect(page.locator("#version-title")).to_have_text(f"tools@{new['short_id']}")
    expect(page.locator("#packages")).to_contain_text("alpha==2.0")
    expect(page.locator("#packages")).to_contain_text("beta==0.1")
    expect(page.locator("#run-line")).to_have_text(
        f"gpupool run --env tools@{new['short_id']} -- python train.py"
    )
    page.get_by_role("link", name=f"tools@{old['short_id']}").click()
    expect(page.locator("#packages")).to_have_text("alpha==1.0")
    page.goto("/environments/default/nothing")
    expect(page.get_by_role("heading", level=1)).to_have_text("No environment nothing")

    page.goto("/jobs/new")
    page.get_by_label("Command").fill(
        "python -c \"import alpha; print('alpha', alpha.__version__)\""
    )
    page.get_by_label("Python environment").select_option("tools")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"), timeout=SLOW)
    expect(page.locator("#status-line")).to_contain_text("succeeded", timeout=3 * SLOW)
    expect(page.locator("#log")).to_contain_text("alpha 2.0", timeout=SLOW)
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
