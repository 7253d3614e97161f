"""Training metrics in a real browser (Debian's chromium, Playwright) on a real server: two
runs of the PyTorch example (examples/train_tiny.py) log their loss per step; the job page
draws the curve, against step and against time, and the compare view overlays both runs
with their specs side by side."""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.support.chromium import NEEDS_CHROMIUM, SLOW
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

pytestmark = NEEDS_CHROMIUM
sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("torch")
expect = sync_api.expect
STEPS = 30


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose runners sample the GPUs from a file standing in for NVML."""
    base = tmp_path_factory.mktemp("metrics-ui")
    samples = base / "nvml.json"
    env = {"GPUPOOL_GPU_MEMORY_SAMPLER": f"file:{samples}"}
    process = ServerProcess(base / "data", env=env).start()
    headers = {"Authorization": f"Bearer {process.token}"}
    nodes = httpx.get(f"{process.url}/api/v1/nodes", headers=headers, timeout=30).json()
    busy = {"utilization": 63, "memory_used": 5 * 2**30}
    samples.write_text(json.dumps({g["uuid"]: busy for n in nodes for g in n["gpus"]}))
    samples.chmod(0o644)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def runs(pool: ServerProcess) -> Iterator[list[int]]:
    """Two runs of the example at two learning rates, ended, every point kept."""
    workdir = Path(tempfile.mkdtemp(prefix="gpupool-metrics-", dir="/tmp"))
    workdir.chmod(0o1777)
    shutil.copy(REPO / "examples" / "train_tiny.py", workdir / "train_tiny.py")
    headers = {"Authorization": f"Bearer {pool.token}"}
    with httpx.Client(base_url=f"{pool.url}/api/v1", headers=headers, timeout=30) as api:
        ids = []
        for name, lr, gpus in (("lr-small", "0.02", 1), ("lr-big", "0.1", None)):
            command = [sys.executable, "train_tiny.py", "--steps", str(STEPS), "--lr", lr]
            body = {"command": command, "name": name, "workdir": str(workdir)}
            body |= {"resources": {"gpus": gpus}} if gpus else {}
            ids.append(api.post("/jobs", json=body).json()["id"])
        for job_id in ids:
            wait_for(lambda j=job_id: _kept(api, j), 120, f"job {job_id}'s metrics", 0.2)
    yield ids
    shutil.rmtree(workdir, ignore_errors=True)


def _kept(api: httpx.Client, job_id: int) -> bool:
    job = api.get(f"/jobs/{job_id}").json()
    assert job["status"] not in ("failed", "lost", "cancelled"), job
    return api.get(f"/jobs/{job_id}/metrics").json()["complete"]


@pytest.fixture
def page(browser, pool: ServerProcess) -> Iterator[object]:  # noqa: ANN001
    context = browser.new_context(base_url=pool.url, viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.goto("/login?next=/jobs")
    opened.get_by_label("User name").fill("admin")
    opened.get_by_label("Password or API token").fill(pool.token)
    opened.get_by_role("button", name="Sign in").click()
    expect(opened).to_have_url(re.compile(r"^[^?]*/jobs$"), timeout=SLOW)
    yield opened
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


def test_the_job_page_draws_the_loss_curve(page, runs: list[int]) -> None:  # noqa: ANN001
    page.goto(f"/jobs/{runs[0]}")
    loss = page.locator('figure[data-metric="loss"]')
    expect(loss.locator("polyline")).to_have_attribute("data-points", str(STEPS), timeout=SLOW)
    expect(loss.locator("svg")).to_have_attribute("aria-label", re.compile("against step"))
    points = loss.locator("polyline").get_attribute("points").split()
    heights = [float(p.split(",")[1]) for p in points]
    assert heights[-1] > heights[0], "the loss falls: its line ends lower (SVG y grows down)"
    page.get_by_label("time", exact=True).check()
    expect(loss.locator("svg")).to_have_attribute("aria-label", re.compile("against time"))
    expect(page.locator('figure[data-metric="lr"]')).to_be_visible()
    utilization = page.locator('figure[data-metric="gpu.*.utilization"]')
    expect(utilization.locator("figcaption")).to_have_text("GPU utilisation (%)")
    expect(utilization.locator("polyline")).to_have_attribute("data-label", "GPU 0")


def test_the_compare_view_overlays_two_runs(page, runs: list[int]) -> None:  # noqa: ANN001
    first, second = runs
    for job_id in runs:
        page.get_by_label(f"Compare job #{job_id}").check()
    page.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(re.compile(r"/jobs/compare\?ids="), timeout=SLOW)
    loss = page.locator('figure[data-metric="loss"]')
    expect(loss.locator("polyline")).to_have_count(2, timeout=SLOW)
    expect(loss.locator(".metric-legend")).to_contain_text(f"#{first} lr-small")
    expect(loss.locator(".metric-legend")).to_contain_text(f"#{second} lr-big")
    specs = page.locator("#compare-specs")
    expect(specs).to_contain_text("0.02")
    expect(specs).to_contain_text("0.1")
    expect(specs.locator('tr[data-final="loss"] td')).to_have_count(2)
