"""The experiments' pages in a real browser (Debian's chromium, driven by Playwright) on a
real server: a small search whose trials are CPU jobs that log their objective with
gpupool.metrics, from the top bar's link to its page (the trials table, the curves, the
parallel coordinates), on to a trial's job, and the best trial's outputs registered as a model
with the page's form; another experiment paused, resumed and stopped with the page's buttons;
another team's member sees neither."""

from __future__ import annotations

import re
import secrets
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

# A trial: its error is lowest near x = 0.3 with adam, falls with each step, and it leaves
# its "weights" in its outputs.
TRIAL = (
    "import json, os\n"
    "from gpupool import metrics\n"
    "p = json.loads(os.environ['GPUPOOL_PARAMS'])\n"
    "error = abs(p['x'] - 0.3) + (0.2 if p['opt'] == 'sgd' else 0.0)\n"
    "for step in range(1, 6):\n"
    "    metrics.log(step=step, error=error + 1.0 / step)\n"
    "with open(os.path.join(os.environ['GPUPOOL_OUTPUT_DIR'], 'weights.bin'), 'w') as f:\n"
    "    f.write(json.dumps(p))\n"
)
TRIALS = 4


def search(name: str, command: list[str], **fields: object) -> dict:
    return {
        "name": name,
        "objective": {"metric": "error", "direction": "minimize"},
        "parameters": {
            "x": {"type": "float", "low": 0.0, "high": 1.0},
            "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
        },
        "sampler": {"name": "random", "seed": 5},
        "max_trials": TRIALS,
        "max_concurrent": 2,
        "trial": {"command": command, "resources": {"cpus": 0.5}},
    } | fields


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("experiments") / "data").start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def alice(server: ServerProcess) -> str:
    """A member of team search: her API token, also her web password."""
    return _member(_api(server, server.token), "alice", "search")


def test_an_experiments_page_shows_its_trials_curves_and_parameters_and_registers_the_best(
    server: ServerProcess,
    browser,  # noqa: ANN001
    alice: str,
) -> None:
    api = _api(server, alice)
    made = api.post("/experiments", json=search("tune", [sys.executable, "-c", TRIAL]))
    assert made.status_code == 201, made.text
    ref = made.json()["id"]

    page, errors = _signed_in(browser, server, "alice", alice)
    page.get_by_role("link", name="Experiments").click()
    expect(page).to_have_url(re.compile(r"/experiments$"))
    row = page.locator(f"#experiment-rows tr[data-experiment='{ref}']")
    expect(row).to_contain_text("search")
    row.get_by_role("link", name="tune").click()
    expect(page).to_have_url(re.compile(rf"/experiments/{ref}$"))

    # the page draws itself again as its trials move on, until the experiment ends
    shown = wait_for(lambda: _ended(api, ref), 120, "the experiment ends", 0.2)
    assert shown["status"] == "succeeded", shown
    expect(page.locator("#status")).to_have_text("succeeded", timeout=SLOW)
    best = shown["best"]
    rows = page.locator("#trial-rows tr")
    expect(rows).to_have_count(TRIALS)
    for trial in shown["trial_list"]:
        cells = page.locator(f"#trial-rows tr[data-trial='{trial['number']}']")
        expect(cells).to_contain_text(trial["params"]["opt"])
        expect(cells.locator(".trial-state")).to_have_text("completed")
        expect(cells.get_by_role("link", name=f"#{trial['job_id']}")).to_be_visible()
    expect(page.locator(".best-trial")).to_have_attribute("data-trial", str(best["trial"]))
    expect(page.locator("#curves .trial-curve")).to_have_count(TRIALS)
    expect(page.locator("#curves .trial-curve.best")).to_have_attribute(
        "data-trial", str(best["trial"])
    )
    expect(page.locator("#parallel .parallel-axis")).to_have_count(3)  # x, opt, error
    expect(page.locator("#parallel .trial-path")).to_have_count(TRIALS)
    expect(page.locator("#parallel [data-axis=opt]")).to_contain_text("sgd")

    page.locator(".best-trial").get_by_role("link", name=f"#{best['job_id']}").click()
    expect(page).to_have_url(re.compile(rf"/jobs/{best['job_id']}$"))
    page.go_back()

    manage = page.get_by_role("region", name="Manage")
    manage.get_by_label(re.compile("Register the best trial's outputs")).fill("tuned")
    manage.get_by_role("button", name="Register").click()
    expect(page.locator("#manage-status")).to_contain_text("Registered tuned:1", timeout=SLOW)
    page.locator("#registered").click()
    expect(page).to_have_url(re.compile(r"/models/search/tuned\?version=1$"))
    expect(page.locator(".files-table")).to_contain_text("weights.bin")
    expect(page.locator("#source-job")).to_have_text(f"#{best['job_id']}")
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"


def test_the_page_pauses_resumes_and_stops_an_experiment_and_follows_it(
    server: ServerProcess,
    browser,  # noqa: ANN001
    alice: str,
) -> None:
    api = _api(server, alice)
    body = search("held", [sys.executable, "-c", "import time; time.sleep(300)"])
    ref = api.post("/experiments", json=body | {"max_concurrent": 1}).json()["id"]
    wait_for(lambda: _running(api, ref), 60, "a trial runs", 0.1)

    page, errors = _signed_in(browser, server, "alice", alice)
    page.goto(f"/experiments/{ref}")
    manage = page.get_by_role("region", name="Manage")
    manage.get_by_role("button", name="Pause").click()
    expect(page.locator("#status")).to_have_text("paused", timeout=SLOW)
    assert api.get(f"/experiments/{ref}").json()["status"] == "paused"
    manage.get_by_role("button", name="Resume").click()
    expect(page.locator("#status")).to_have_text("running", timeout=SLOW)
    # a change made elsewhere (the CLI, the API) shows by itself
    assert api.post(f"/experiments/{ref}/pause").status_code == 200
    expect(page.locator("#status")).to_have_text("paused", timeout=SLOW)
    # and the page, the same as the server's answer, is not drawn again and again
    expect(page.locator("#experiment")).to_have_attribute("data-current", "true")

    page.once("dialog", lambda dialog: dialog.accept())
    manage.get_by_role("button", name="Stop experiment").click()
    expect(page.locator("#status")).to_have_text("stopped", timeout=SLOW)
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    shown = api.get(f"/experiments/{ref}").json()
    assert shown["status"] == "stopped" and shown["trials"]["running"] == 0
    assert shown["trials"]["cancelled"] >= 1
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"


def test_another_teams_member_sees_no_experiment_of_the_team(
    server: ServerProcess,
    browser,  # noqa: ANN001
    alice: str,
) -> None:
    api = _api(server, alice)
    body = search("private", [sys.executable, "-c", TRIAL], max_trials=1)
    ref = api.post("/experiments", json=body).json()["id"]
    bob = _member(_api(server, server.token), "bob", "rivals")

    page, errors = _signed_in(browser, server, "bob", bob)
    page.get_by_role("link", name="Experiments").click()
    expect(page.locator("#experiment-rows")).to_contain_text("No experiments yet")
    for address in (f"/experiments/{ref}", "/experiments/private"):
        shown = page.goto(address)
        assert shown is not None and shown.status == 404, address
        expect(page.locator("#nf-title")).to_have_text(f"No experiment {address[13:]}")
        expect(page.locator("main")).not_to_contain_text("alice")  # nothing of it shows
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"


def _ended(api: httpx.Client, ref: int) -> dict | None:
    shown = api.get(f"/experiments/{ref}").json()
    return shown if shown["status"] not in ("running", "paused") else None


def _running(api: httpx.Client, ref: int) -> bool:
    return api.get(f"/experiments/{ref}").json()["trials"]["running"] > 0


def _api(server: ServerProcess, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def _member(admin: httpx.Client, name: str, team: str) -> str:
    """A new member of a new ``team``; its API token (also its web password)."""
    assert admin.post("/teams", json={"name": team}).status_code == 201
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    made = admin.post("/tokens", json={"user": name, "name": secrets.token_hex(3)})
    return made.json()["token"]


def _signed_in(browser, server: ServerProcess, user: str, password: str):  # noqa: ANN001, ANN202
    """A fresh page signed in as ``user``, on the front page; the JavaScript errors it meets."""
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto("/login?next=/")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password or API token").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(re.escape(server.url) + r"/$"), timeout=SLOW)
    return page, errors
