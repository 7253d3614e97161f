"""The cluster page in a real browser: each node's state, drain and join time; an admin
drains and undrains a node with its buttons, a member has none; the nodes by fabric group,
each with its topology matrix (from the declared links), NICs and what its jobs hold, as the
server draws them and as the page's script redraws them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.server import ServerProcess

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
LINKS = "0-1:NV4,2-3:PIX"  # GPUs 0 and 1 share 4 NVLinks, 2 and 3 a PCIe switch


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real server with 4 declared A100s whose links are declared too (GPUPOOL_DECLARED_LINKS)."""
    process = ServerProcess(tmp_path / "data", env={"GPUPOOL_DECLARED_LINKS": LINKS}).start()
    yield process
    process.stop()


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


def test_the_nodes_page_shows_the_matrix_usage_and_a_drained_nodes_gpus_as_not_free(
    page,  # noqa: ANN001
    server: ServerProcess,
) -> None:
    with api(server) as admin:
        name = admin.get("/nodes").json()[0]["name"]
    sign_in(page, server, "admin", server.token)
    group = page.locator("section.fabric-group[data-group='']")
    expect(group.locator("h2")).to_have_text(re.compile(r"No fabric group\s+1 node · 4 GPUs"))
    card = group.locator(f"section.node[data-node='{name}']")
    matrix = card.locator("details.topology")
    for drawn_by in ("the server", "the script"):
        expect(matrix).to_have_attribute("open", "")  # 4 GPUs: open at first
        expect_matrix(matrix)
        if drawn_by == "the server":
            with api(server) as admin:  # a held job changes the node: the script redraws it
                body = {"command": ["sleep", "300"], "resources": {"gpus": 1, "cpus": 2}}
                assert admin.post("/jobs", json=body).status_code == 201
            expect(card.locator("[data-use='gpus']")).to_contain_text("1 of 4 (25%)", timeout=SLOW)
    expect(card.locator("[data-use='cpus']")).to_contain_text("2 of 64 (3%)")
    expect(page.locator("#summary")).to_have_text(re.compile(r"4 GPUs · 1 in use · 3 free$"))

    card.locator("details.topology > summary").click()  # closed by the user: stays closed
    card.locator("details.network > summary").click()
    expect(card.locator("table.nics")).to_be_visible()
    page.get_by_label(f"Reason to drain {name}").fill("disk swap")
    page.get_by_role("button", name=f"Drain {name}").click()
    summary = page.locator("#summary")
    expect(summary).to_contain_text("0 free · 3 idle on drained or down nodes", timeout=SLOW)
    expect(page.locator("#node-summary")).to_have_text(re.compile(r"1 node: 0 up · 1 drained"))
    expect(page.locator("#model-summary")).to_have_text("A100-SXM4-80GB: 0 of 4 free")
    expect(card.locator(".gpu-free", has_text="Idle: the node is drained")).to_have_count(3)
    expect(matrix).not_to_have_attribute("open", "")
    expect(card.locator("table.nics")).to_be_visible()
    page.screenshot(path="/tmp/ui-nodes-drained.png", full_page=True)

    page.reload()  # the page as the server renders it says the same
    expect(summary).to_contain_text("0 free · 3 idle on drained or down nodes")
    expect(card.locator(".gpu-free", has_text="Idle: the node is drained")).to_have_count(3)
    expect(card.locator(".gpu-free", has_text="Free")).to_have_count(0)


def expect_matrix(matrix) -> None:  # noqa: ANN001 - a Playwright locator
    """The declared links as nvidia-smi topo -m writes them: GPU columns, '-' where unknown."""
    expect(matrix.locator("thead th")).to_have_text(["GPU0", "GPU1", "GPU2", "GPU3"])
    rows = matrix.locator("tbody tr")
    expect(rows).to_have_count(4)
    expected = [["X", "NV4", "-", "-"], ["NV4", "X", "-", "-"], ["-", "-", "X", "PIX"]]
    expected.append(["-", "-", "PIX", "X"])
    for i, cells in enumerate(expected):
        expect(rows.nth(i).locator("th")).to_have_text(f"GPU{i}")
        expect(rows.nth(i).locator("td")).to_have_text(cells)
    expect(matrix.locator("td.link-nv")).to_have_count(2)
    expect(matrix.locator("td.link-pix")).to_have_count(2)
