"""The queue page, the teams page and the job page's "why" card, against a real server."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import ServerProcess
from tests.support.waiting import wait_for
from tests.support.web import submit


@pytest.fixture
def held(admin: tuple[httpx.Client, str]) -> Iterator[dict]:
    """A job holding all 4 GPUs for a while; cancelled afterwards."""
    client, csrf = admin
    job = submit(client, csrf, resources={"gpus": 4}, max_runtime_seconds=3600, name="holder")
    wait_for(lambda: status(client, job["id"]) == "running" or None, 30, "the holder to run", 0.1)
    yield job
    client.post(f"/api/v1/jobs/{job['id']}/cancel", headers={"x-csrf-token": csrf})


def status(client: httpx.Client, job_id: int) -> str:
    return client.get(f"/api/v1/jobs/{job_id}").json()["status"]


def explained(client: httpx.Client, job_id: int) -> dict:
    def ready() -> dict | None:
        why = client.get(f"/api/v1/jobs/{job_id}/why").json()
        return why if why["position"] and why["eta"] is not None else None

    return wait_for(ready, 30, f"job {job_id} to be explained", 0.1)


@pytest.mark.parametrize("path", ["/queue", "/teams"])
def test_the_pages_need_a_session(ui_server: ServerProcess, path: str) -> None:
    page = httpx.get(f"{ui_server.url}{path}")
    assert page.status_code == 303
    assert page.headers["location"] == f"/login?next={path}"


def test_the_nav_links_to_the_queue_and_the_teams(admin: tuple[httpx.Client, str]) -> None:
    client, _ = admin
    for path, label in [("/queue", "Queue"), ("/teams", "Teams")]:
        page = client.get(path)
        assert page.status_code == 200, page.text
        assert page.headers["cache-control"] == "no-store"
        assert f'<a href="{path}" aria-current="page">{label}</a>' in page.text
        assert f'<a href="{path}">{label}</a>' in client.get("/jobs").text


def test_an_empty_queue_says_so(admin: tuple[httpx.Client, str]) -> None:
    client, _ = admin
    page = client.get("/queue").text
    assert "No job is waiting" in page
    assert "How start times are estimated" in page


def test_the_queue_shows_each_waiting_job_with_why_and_when(
    admin: tuple[httpx.Client, str], held: dict
) -> None:
    client, csrf = admin
    evil = "<script>alert('q')</script>"
    waiting = submit(client, csrf, resources={"gpus": 2}, name=evil, max_runtime_seconds=60)
    explained(client, waiting["id"])
    try:
        page = client.get("/queue").text
        row = re.search(rf'<tr data-id="{waiting["id"]}">(.*?)</tr>', page, re.S).group(1)
        assert "#1" in row and f'href="/jobs/{waiting["id"]}"' in row
        assert '<code class="code">InsufficientGpus</code>' in row
        assert "about" in row and "<time" in row and "(in " in row
        assert "Team default" in page and "1 waiting" in page
        assert "<script>alert" not in page and "&lt;script&gt;" in page
        assert "no new job is submitted" in page
    finally:
        client.post(f"/api/v1/jobs/{waiting['id']}/cancel", headers={"x-csrf-token": csrf})


def test_the_job_page_says_why_a_job_waits(admin: tuple[httpx.Client, str], held: dict) -> None:
    client, csrf = admin
    waiting = submit(client, csrf, resources={"gpus": 1}, max_runtime_seconds=60)
    explained(client, waiting["id"])
    try:
        page = client.get(f"/jobs/{waiting['id']}").text
        card = re.search(r'<section class="card why-card" id="why"[^>]*>', page).group(0)
        assert "hidden" not in card
        assert "Why is it waiting?" in page and "#1 in team default's queue" in page
        assert "this job runs 1m, its max runtime" in page
        running = client.get(f"/jobs/{held['id']}").text
        assert re.search(r'<section class="card why-card" id="why"[^>]* hidden>', running)
    finally:
        client.post(f"/api/v1/jobs/{waiting['id']}/cancel", headers={"x-csrf-token": csrf})


def test_the_teams_page_draws_a_chart_per_team(
    ui_server: ServerProcess, admin: tuple[httpx.Client, str], held: dict
) -> None:
    client, csrf = admin
    client.post(
        "/api/v1/teams",
        json={"name": "vision", "guarantee": {"*": 1}, "limit": 2},
        headers={"x-csrf-token": csrf},
    )
    page = client.get("/teams").text
    assert page.count('<svg class="team-chart"') == 2
    for series in ["series-held-area", "series-held", "series-fair", "series-demand"]:
        assert f'class="{series}"' in page
    assert 'class="series-guarantee"' in page and 'class="series-limit"' in page
    for legend in ["GPUs in use", "Fair share", "Demand", "Guarantee", "Limit"]:
        assert legend in page
    default = re.search(r'data-team="default">(.*?)</section>', page, re.S).group(1)
    assert "<dt>In use now</dt><dd>4 GPUs</dd>" in default
    points = re.search(r'class="series-held" points="([^"]+)"', default).group(1).split()
    assert len(points) == 49, "48 periods and now"
    assert "<title" in default and "Show the numbers" in default
    vision = re.search(r'data-team="vision">(.*?)</section>', page, re.S).group(1)
    assert "No GPU use and no waiting job in this period" in vision

    six = client.get("/teams?hours=6").text
    assert '<option value="6" selected>last 6 hours</option>' in six
    odd = client.get("/teams?hours=<b>").text
    assert '<option value="24" selected>last 24 hours</option>' in odd


def test_a_member_sees_only_their_teams(
    ui_server: ServerProcess, admin: tuple[httpx.Client, str], held: dict
) -> None:
    client, csrf = admin
    write = {"x-csrf-token": csrf}
    client.post("/api/v1/teams", json={"name": "speech"}, headers=write)
    user = {"name": "carol", "role": "member", "teams": ["speech"], "password": "carol-secret"}
    assert client.post("/api/v1/users", json=user, headers=write).status_code == 201
    hidden = submit(client, csrf, resources={"gpus": 1})
    try:
        with httpx.Client(base_url=ui_server.url, timeout=10) as carol:
            signed = carol.post(
                "/api/v1/session", json={"user": "carol", "password": "carol-secret"}
            )
            assert signed.status_code == 200
            queue = carol.get("/queue").text
            assert f'data-id="{hidden["id"]}"' not in queue and "No job is waiting" in queue
            teams = carol.get("/teams").text
            assert 'data-team="speech"' in teams and 'data-team="default"' not in teams
    finally:
        client.post(f"/api/v1/jobs/{hidden['id']}/cancel", headers=write)
