"""A real JupyterLab started through gpupool, on one real server, with a short idle time.

A member starts a notebook with the CLI; a cell run through the proxy (the Jupyter REST and
WebSocket protocols) sees the GPU it was given; in chromium, signed in, the notebook's page
links to its JupyterLab, which loads through the proxy. A member of another team gets 404
on its URL and on its kernel's WebSocket; its own port refuses whoever lacks its token.
In the browser, a cell of a new notebook runs too (its kernel's WebSocket via the proxy),
and the list's form starts another notebook, which its page's Stop button stops.
Idle, it is stopped: its GPU is free, its page says why, and its Resume button starts it
again in the same workspace, the file written before still there.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.cli import Cli
from tests.support.notebooks import Lab, execute_request
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for
from tests.support.workloads import runner_client

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

IDLE_SECONDS = 12  # the server's GPUPOOL_NOTEBOOK_IDLE_SECONDS: a look every 3 s
# keeps its kernel busy (never idle) until the file "release" appears in the workspace
BUSY = "import os, time\nwhile not os.path.exists('release'):\n    time.sleep(0.2)"
LISTENING = re.compile(r"http://127\.0\.0\.1:(\d+)/notebooks/\d+/lab\?token=(\S+)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("notebooks") / "data"
    env = {"GPUPOOL_NOTEBOOK_IDLE_SECONDS": str(IDLE_SECONDS)}
    process = ServerProcess(data, env=env).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/api/v1",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=30,
    )


def test_a_notebook_runs_behind_the_proxy_and_gives_its_gpu_back_when_idle(
    server: ServerProcess,
    admin: httpx.Client,
    browser,  # noqa: ANN001
) -> None:
    alice = _member(admin, "lab")
    bob = _member(admin, "rivals")
    made = Cli(server.url, alice).json(
        "notebook", "start", "--gpus", "1", "--name", "explore", "-o", "json"
    )
    notebook, lab = made["id"], Lab(server.url, made["id"], alice)
    lab.answering()
    busy = lab.start_kernel()
    _start_busy(lab, busy)

    kernel = lab.start_kernel()
    given = _gpu_of(admin, made["job_id"])
    printed = lab.run(kernel, "import os\nprint(os.environ['CUDA_VISIBLE_DEVICES'])")
    assert printed.strip() == given
    lab.run(kernel, "open('kept.txt', 'w').write('written before the idle stop')")

    _another_team_gets_404(server, Lab(server.url, notebook, bob), kernel)
    _its_own_port_refuses_without_its_token(admin, made["job_id"], notebook, server.data_dir)

    page, errors = _signed_in(browser, server, "alice", alice)
    _start_and_stop_one_in_the_ui(page)
    page.goto(f"/notebooks/{notebook}")
    expect(page.locator("#nb-state")).to_contain_text("running")
    expect(page.locator("#open")).to_have_attribute("href", f"/notebooks/{notebook}/lab")
    page.goto(f"/notebooks/{notebook}/lab")
    expect(page.locator("#filebrowser")).to_contain_text("kept.txt", timeout=SLOW)
    _run_a_cell_in_the_browser(page, given)

    lab.delete_kernel(kernel)
    lab.put_file("release", "")  # the busy kernel ends its cell: the notebook goes idle
    held = wait_for(lambda: _idle_gpus(admin, notebook), IDLE_SECONDS, "the admin's view of it")
    assert held["user"] == "alice" and held["gpus"] == 1 and held["released_in_seconds"] < 15
    stopped = wait_for(
        lambda: _stopped(admin, notebook), IDLE_SECONDS * 4, "the idle notebook to stop", 0.5
    )
    assert stopped["stop_reason"] == "IdleGpuRelease"
    wait_for(lambda: not _holds_gpus(admin, made["job_id"]), 60, "its GPU to be free", 0.2)
    listed = Cli(server.url, alice).ok("notebook", "ls")
    assert "explore" in listed and "stopped" in listed
    page.goto(f"/notebooks/{notebook}")
    expect(page.locator("#nb-message")).to_contain_text(f"Stopped after {IDLE_SECONDS} s idle")
    expect(page.locator("#nb-message")).to_contain_text("kernel activity alone decided")

    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#nb-state")).to_contain_text("running", timeout=SLOW)
    lab.answering()
    assert lab.read_file("kept.txt") == "written before the idle stop"
    assert (server.data_dir / "workspaces" / "alice" / "kept.txt").exists()  # one per user
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"


# -- steps -------------------------------------------------------------------------------------


def _member(admin: httpx.Client, team: str) -> str:
    """A new member of ``team`` (made if new); its API token (also its web password)."""
    if team not in {t["name"] for t in admin.get("/teams").json()}:
        assert admin.post("/teams", json={"name": team}).status_code == 201
    name = "alice" if team == "lab" else "bob"
    assert admin.post("/users", json={"name": name, "teams": [team]}).status_code == 201
    return admin.post("/tokens", json={"user": name, "name": secrets.token_hex(3)}).json()["token"]


def _start_busy(lab: Lab, kernel: str) -> None:
    """Run BUSY in ``kernel`` without waiting for its end (it ends once 'release' exists)."""
    with connect(lab.channels_url(kernel), additional_headers=lab.headers) as socket:
        socket.send(json.dumps(execute_request(BUSY)))


def _start_and_stop_one_in_the_ui(page) -> None:  # noqa: ANN001
    """The list's form starts a notebook (no GPU) and opens its page; its Stop button stops it."""
    page.get_by_label("Name").fill("second")
    page.get_by_label("GPUs").fill("0")
    page.get_by_role("button", name="Start notebook").click()
    expect(page).to_have_url(re.compile(r"/notebooks/\d+$"), timeout=SLOW)
    expect(page.locator("h1")).to_contain_text("second")
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#nb-state")).to_contain_text(re.compile("stopp"), timeout=SLOW)
    expect(page.locator("#nb-message")).to_contain_text("stopped by alice")


def _run_a_cell_in_the_browser(page, given: str) -> None:  # noqa: ANN001
    """A new notebook from the launcher: its kernel's WebSocket goes through the proxy with
    the sign-in cookie, and its cell's output comes back."""
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    expect(editor).to_be_visible(timeout=SLOW)
    # the kernel's status comes over its WebSocket: idle once connected through the proxy
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=SLOW)
    editor.click()
    page.keyboard.type("import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
    page.keyboard.press("Shift+Enter")
    expect(page.locator(".jp-OutputArea-output").first).to_contain_text(given, timeout=SLOW)


def _gpu_of(admin: httpx.Client, job_id: int) -> str:
    placement = admin.get(f"/jobs/{job_id}").json()["placement"]
    return placement["gpus"][0]["uuid"]


def _another_team_gets_404(server: ServerProcess, other: Lab, kernel: str) -> None:
    for path in ("lab", "api/kernels", f"api/kernels/{kernel}"):
        answer = other.get(path)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["error"]["code"] == "not_found"
    with pytest.raises(InvalidStatus) as refused:
        connect(other.channels_url(kernel), additional_headers=other.headers)
    assert refused.value.response.status_code == 404
    anonymous = httpx.get(f"{server.url}/notebooks/1/lab", headers={"Accept": "text/html"})
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")


def _its_own_port_refuses_without_its_token(
    admin: httpx.Client, job_id: int, notebook: int, data_dir: Path
) -> None:
    log = admin.get(f"/jobs/{job_id}/logs").json()["text"]
    found = LISTENING.search(log)
    assert found, log
    port, shown = found.groups()
    assert shown == "...", "the notebook's token is never in its log"
    direct = f"http://127.0.0.1:{port}/notebooks/{notebook}"
    with pytest.raises(httpx.ConnectError):  # on its own loopback: no process of the node's
        httpx.get(f"{direct}/api/kernels", trust_env=False, timeout=5)
    with runner_client(data_dir, job_id) as through_runner:  # the platform's way in
        for headers in ({}, {"Authorization": "token not-the-token"}):
            for path in ("api/kernels", "api/contents/kept.txt"):
                answer = through_runner.get(f"{direct}/{path}", headers=headers)
                assert answer.status_code == 403, (path, answer.status_code)


def _signed_in(browser, server: ServerProcess, user: str, password: str):  # noqa: ANN001, ANN202
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    # JavaScript errors of gpupool's own pages (JupyterLab's, under /lab, are its own)
    errors: list[str] = []
    page.on(
        "pageerror",
        lambda error: "/lab" not in page.url and errors.append(f"{page.url}: {error}"),
    )
    page.goto("/login?next=/notebooks")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password or API token").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/notebooks$"), timeout=SLOW)
    expect(page.locator("#notebooks")).to_contain_text("explore")
    return page, errors


def _stopped(admin: httpx.Client, notebook: int) -> dict | None:
    shown = admin.get(f"/notebooks/{notebook}").json()
    return shown if shown["state"] == "stopped" else None


def _idle_gpus(admin: httpx.Client, notebook: int) -> dict | None:
    """The admin's view of ``notebook`` among those holding idle GPUs: idle for longer than
    a look of the watch (every IDLE_SECONDS / 4) refreshes a busy one."""
    longer_than = IDLE_SECONDS / 4 + 2
    held = admin.get("/notebooks/idle-gpus", params={"longer_than": longer_than}).json()
    return next((i for i in held if i["notebook_id"] == notebook), None)


def _holds_gpus(admin: httpx.Client, job_id: int) -> bool:
    nodes = admin.get("/nodes").json()
    return any(h["job_id"] == job_id for n in nodes for g in n["gpus"] for h in g["holders"])
