"""The deployments' pages in a real browser (Debian's chromium, driven by Playwright) on a
real server: a deployment of a command (the echo server, no model) from the top bar's link
to its page, its replica with its node and health, a test request sent with the page's form
and answered by the replica, the request counted; another team's member sees nothing of it."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.proxying import echo_command
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("deployments") / "data"
    env = {"GPUPOOL_DEPLOY_HEALTH_INTERVAL_SECONDS": "0.5"}
    process = ServerProcess(data, env=env).start()
    yield process
    process.stop()


def test_a_deployments_page_shows_its_replica_and_sends_a_test_request(
    server: ServerProcess,
    browser,  # noqa: ANN001
) -> None:
    admin = _api(server, server.token)
    alice, bob = _member(admin, "alice", "servers"), _member(admin, "bob", "rivals")
    body = {"name": "echo", "command": echo_command(), "replicas": 1}
    made = _api(server, alice).post("/deployments", json=body)
    assert made.status_code == 201, made.text
    replica = wait_for(lambda: _ready_replica(admin), 30, "its replica to be ready", 0.1)
    assert replica["node"]

    page, errors = _signed_in(browser, server, "alice", alice)
    page.get_by_role("link", name="Deployments").click()
    expect(page).to_have_url(re.compile(r"/deployments$"))
    row = page.locator("#deployment-rows tr[data-name=echo]")
    expect(row).to_contain_text("1 / 1")
    row.get_by_role("link", name="echo").click()

    expect(page).to_have_url(re.compile(r"/deployments/echo$"))
    replicas = page.locator("#replica-rows tr")
    expect(replicas).to_have_count(1)
    expect(replicas).to_contain_text(replica["node"])
    expect(replicas.locator(".replica-state")).to_have_text("ready")
    expect(page.locator("#requests")).to_have_text("0 (0 failed)")
    page.locator("#try-path").fill("/predict?from=the-page")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#try-status")).to_contain_text("200", timeout=SLOW)
    answer = page.locator("#try-answer")
    expect(answer).to_contain_text('"path": "/predict"')
    expect(answer).to_contain_text('"query": "from=the-page"')
    expect(answer).to_contain_text('"method": "POST"')
    expect(answer).not_to_contain_text("gpupool_session")  # the session stays with the platform
    expect(page.locator("#requests")).to_have_text("1 (0 failed)", timeout=SLOW)  # live
    expect(page.locator("#latency")).to_contain_text("p50")
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"

    page, errors = _signed_in(browser, server, "bob", bob)
    page.get_by_role("link", name="Deployments").click()
    expect(page.locator("#deployment-rows")).to_contain_text("No deployments yet")
    shown = page.goto("/deployments/echo")
    assert shown is not None and shown.status == 404
    expect(page.locator("#nf-title")).to_have_text("No deployment echo")
    expect(page.locator("main")).not_to_contain_text("/serve/echo/")
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"
    assert admin.get("/deployments/echo").json()["traffic"]["requests"] == 1


def test_the_deployments_page_scales_updates_and_stops_it(
    server: ServerProcess,
    browser,  # noqa: ANN001
) -> None:
    """A deployment of a model's version 1 served by a command: its page's buttons scale it
    to 2 replicas, roll it to version 2, and stop it, through the REST API."""
    carol = _member(_api(server, server.token), "carol", "ops")
    api = _api(server, carol)
    for _ in range(2):
        _register(api, "weights")
    body = {"name": "managed", "model": "weights", "version": 1, "command": echo_command()}
    made = api.post("/deployments", json=body)
    assert made.status_code == 201, made.text
    wait_for(lambda: _ready_replica(api, "managed"), 30, "its replica to be ready", 0.1)

    page, errors = _signed_in(browser, server, "carol", carol)
    page.goto("/deployments/managed")
    manage = page.get_by_role("region", name="Manage")
    manage.get_by_label("Replicas").fill("2")
    manage.get_by_role("button", name="Scale").click()
    expect(page.locator("#manage-status")).to_have_text("Scaled to 2 replicas.", timeout=SLOW)
    expect(page.locator("#asked")).to_have_text("2")
    expect(page.locator("#replica-rows tr")).to_have_count(2, timeout=SLOW)  # live
    assert api.get("/deployments/managed").json()["replicas"] == 2

    manage.get_by_label("Version of weights").fill("2")
    manage.get_by_role("button", name="Update").click()
    expect(page.locator("#manage-status")).to_have_text(
        "Rolling to weights:2, replica by replica.", timeout=SLOW
    )
    assert api.get("/deployments/managed").json()["version"] == 2

    page.once("dialog", lambda dialog: dialog.accept())
    manage.get_by_role("button", name="Stop deployment").click()
    expect(page.locator("#manage-status")).to_have_text(
        "Deployment managed is stopped.", timeout=SLOW
    )
    expect(page.locator("#state")).to_have_text("stopped")
    expect(manage.get_by_role("button", name="Scale")).to_be_disabled()
    stopped = api.get("/deployments", params={"stopped": True}).json()
    assert [d["state"] for d in stopped if d["name"] == "managed"] == ["stopped"]
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"


def _register(api: httpx.Client, model: str) -> None:
    """A new version of ``model`` from a job that wrote one file."""
    script = 'printf w > "$GPUPOOL_OUTPUT_DIR/w.bin"'
    job = api.post("/jobs", json={"command": ["sh", "-c", script]}).json()["id"]
    ended = {"succeeded", "failed", "cancelled", "lost"}
    wait_for(lambda: api.get(f"/jobs/{job}").json()["status"] in ended, 60, "the job", 0.1)
    answer = api.post(f"/models/{model}/versions", json={"job_id": job})
    assert answer.status_code == 201, answer.text


def _api(server: ServerProcess, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def _member(admin: httpx.Client, name: str, team: str) -> str:
    """A new member of a new ``team``; its API token (also its web password)."""
    assert admin.post("/teams", json={"name": team}).status_code == 201
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    made = admin.post("/tokens", json={"user": name, "name": secrets.token_hex(3)})
    return made.json()["token"]


def _ready_replica(admin: httpx.Client, name: str = "echo") -> dict | None:
    shown = admin.get(f"/deployments/{name}").json()
    ready = [r for r in shown["replica_list"] if r["state"] == "ready"]
    return ready[0] if ready else None


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
    # the front page itself: "/login?next=/" ends with "/" too
    expect(page).to_have_url(re.compile(re.escape(server.url) + r"/$"), timeout=SLOW)
    return page, errors
