"""The cluster page in a real browser: each node's state, drain and join time; an admin
drains and undrains a node with its buttons, a member has none."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect


def sign_in(page, server: ServerProcess, user: str, password: str) -> None:  # noqa: ANN001
    page.goto("/login?next=/")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password or API token").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(re.escape(server.url) + "/$"), timeout=SLOW)


def api(server: ServerProcess) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=10)


def test_an_admin_drains_and_undrains_a_node_from_the_cluster_page(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    with api(server) as admin:
        name = admin.get("/nodes").json()[0]["name"]
    sign_in(page, server, "admin", server.token)
    card = page.locator(f"section.node[data-node='{name}']")
    expect(card.locator(".node-state")).to_have_text("up")
    expect(card.locator(".node-drain")).to_have_text("no")
    expect(card).to_contain_text("Joined")
    expect(card).to_contain_text("Fabric group")

    page.get_by_label(f"Reason to drain {name}").fill("disk swap")
    page.get_by_role("button", name=f"Drain {name}").click()
    expect(card.locator(".badge.drained")).to_be_visible(timeout=SLOW)
    expect(card.locator(".node-drain")).to_have_text("drained: disk swap")
    expect(card).to_contain_text("not schedulable")
    with api(server) as admin:
        node = admin.get(f"/nodes/{name}").json()
    assert (node["drain"], node["drain_reason"], node["schedulable"]) == (True, "disk swap", False)
    page.reload()  # the page as the server renders it says the same
    expect(card.locator(".node-drain")).to_have_text("drained: disk swap")
    page.screenshot(path="/tmp/ui-cluster-drained.png", full_page=True)

    page.get_by_role("button", name=f"Undrain {name}").click()
    expect(card.locator(".node-drain")).to_have_text("no", timeout=SLOW)
    expect(card.locator(".badge.drained")).to_have_count(0)
    with api(server) as admin:
        assert admin.get(f"/nodes/{name}").json()["schedulable"] is True


def test_a_member_sees_the_nodes_state_and_no_drain_button(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    with api(server) as admin:
        name = admin.get("/nodes").json()[0]["name"]
        body = {"name": "mia", "teams": ["default"], "password": "mia-password-1"}
        assert admin.post("/users", json=body).status_code == 201
        assert admin.post(f"/nodes/{name}/drain", json={"reason": "kernel update"}).is_success
    sign_in(page, server, "mia", "mia-password-1")
    card = page.locator(f"section.node[data-node='{name}']")
    expect(card.locator(".node-drain")).to_have_text("drained: kernel update")
    expect(card.locator(".node-actions")).to_have_count(0)
    with api(server) as admin:  # the page's poll redraws the node: still no button
        assert admin.post(f"/nodes/{name}/undrain").is_success
    expect(card.locator(".node-drain")).to_have_text("no", timeout=SLOW)
    expect(page.get_by_role("button", name=f"Drain {name}")).to_have_count(0)
