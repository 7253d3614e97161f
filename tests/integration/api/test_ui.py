"""The web UI against a real server: sign-in, redirects, CSRF, escaping, static files."""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path

import httpx
import pytest

import gpupool.api
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for
from tests.support.web import submit

UI_FILES = Path(gpupool.api.__file__).parent
PAGES = ["/", "/jobs", "/jobs/new", "/jobs/1"]
CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def test_login_page_renders(ui_server: ServerProcess) -> None:
    page = httpx.get(f"{ui_server.url}/login")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<form id="login-form"' in page.text
    assert '<label for="user">' in page.text and '<label for="password">' in page.text
    assert "csrf-token" not in page.text


@pytest.mark.parametrize("path", PAGES)
def test_pages_redirect_to_login_without_a_session(ui_server: ServerProcess, path: str) -> None:
    page = httpx.get(f"{ui_server.url}{path}")
    assert page.status_code == 303
    assert page.headers["location"] == f"/login?next={path}"


def test_a_stale_cookie_is_sent_to_login(ui_server: ServerProcess) -> None:
    page = httpx.get(f"{ui_server.url}/jobs?show=ended", cookies={"gpupool_session": "forged"})
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=/jobs%3Fshow%3Dended"


def test_signed_in_pages_render_with_the_csrf_meta(
    ui_server: ServerProcess, admin: tuple[httpx.Client, str]
) -> None:
    client, csrf = admin
    job = submit(client, csrf, name="ui-check")
    for path in ["/", "/jobs", "/jobs/new", f"/jobs/{job['id']}"]:
        page = client.get(path)
        assert page.status_code == 200, path
        assert CSRF_META.search(page.text).group(1) == csrf, path
        assert 'class="who-name"' in page.text and "admin" in page.text
        assert page.headers["cache-control"] == "no-store"
    cluster = client.get("/").text
    assert cluster.count('<li class="gpu"') == 4
    assert "A100-SXM4-80GB" in cluster
    assert f'data-id="{job["id"]}"' in client.get("/jobs").text
    detail = client.get(f"/jobs/{job['id']}").text
    assert "ui-check" in detail and 'id="cancel"' in detail and "Submitted" in detail
    assert '<option value="default" selected>' in client.get("/jobs/new").text


def test_login_redirects_a_signed_in_user_to_a_local_page_only(
    admin: tuple[httpx.Client, str],
) -> None:
    client, _ = admin
    assert client.get("/login?next=/jobs").headers["location"] == "/jobs"
    for target in ["//evil.example/x", "https://evil.example/", "/\\evil.example", "jobs"]:
        assert client.get("/login", params={"next": target}).headers["location"] == "/"


def test_api_writes_with_the_cookie_need_the_csrf_header(
    admin: tuple[httpx.Client, str],
) -> None:
    client, csrf = admin
    body = {"command": ["true"]}
    missing = client.post("/api/v1/jobs", json=body)
    assert missing.status_code == 403
    assert missing.json()["error"]["code"] == "csrf_failed"
    wrong = client.post("/api/v1/jobs", json=body, headers={"x-csrf-token": "not-it"})
    assert wrong.status_code == 403
    accepted = client.post("/api/v1/jobs", json=body, headers={"x-csrf-token": csrf})
    assert accepted.status_code == 201, accepted.text


def test_sign_out_ends_the_session(admin: tuple[httpx.Client, str]) -> None:
    client, csrf = admin
    assert client.delete("/api/v1/session", headers={"x-csrf-token": csrf}).status_code == 204
    assert client.get("/jobs").status_code == 303


def test_unknown_jobs_get_a_404_page(admin: tuple[httpx.Client, str]) -> None:
    client, _ = admin
    for path in ["/jobs/999999", "/jobs/abc", "/jobs/99999999999999999999999", "/jobs/-1"]:
        page = client.get(path)
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html")
        assert "that you can see" in page.text
    for path in ["/jobs/new?again=abc", "/jobs/new?again=424242", "/jobs?show=nope&mine=x"]:
        assert client.get(path).status_code == 200, path


def test_a_member_cannot_see_another_teams_job(
    ui_server: ServerProcess, admin: tuple[httpx.Client, str]
) -> None:
    client, csrf = admin
    hidden = submit(client, csrf)
    write = {"x-csrf-token": csrf}
    assert client.post("/api/v1/teams", json={"name": "vision"}, headers=write).status_code == 201
    user = {"name": "alice", "role": "member", "teams": ["vision"], "password": "alice-secret"}
    assert client.post("/api/v1/users", json=user, headers=write).status_code == 201
    with httpx.Client(base_url=ui_server.url, timeout=10) as alice:
        signed = alice.post("/api/v1/session", json={"user": "alice", "password": "alice-secret"})
        assert signed.status_code == 200
        assert alice.get(f"/jobs/{hidden['id']}").status_code == 404
        assert f'data-id="{hidden["id"]}"' not in alice.get("/jobs").text
        form = alice.get("/jobs/new").text
        assert '<option value="vision" selected>' in form and 'value="default"' not in form
        assert '<span class="role">member</span>' in alice.get("/").text


def test_data_is_escaped(admin: tuple[httpx.Client, str]) -> None:
    client, csrf = admin
    evil = "<script>alert('x')</script>"
    job = submit(client, csrf, name=evil, command=["echo", evil], env={"X": '"><img src=x>'})
    for page in [client.get("/jobs").text, client.get(f"/jobs/{job['id']}").text]:
        assert "<script>alert" not in page and "<img src=x>" not in page
        assert "&lt;script&gt;" in page


def test_submit_again_prefills_the_form(admin: tuple[httpx.Client, str]) -> None:
    client, csrf = admin
    job = submit(
        client,
        csrf,
        command=["python", "-c", "print('a b')"],
        name="again",
        env={"A": "1"},
        resources={"gpus": 0.5, "gpu_memory_bytes": "20GiB", "cpus": 2},
    )
    form = client.get(f"/jobs/new?again={job['id']}").text
    command = re.search(r'id="command"[^>]*?value="([^"]*)"', form, re.S).group(1)
    assert shlex.split(html.unescape(command)) == ["python", "-c", "print('a b')"]
    assert 'value="20GiB"' in form and 'value="0.5"' in form and 'value="again"' in form
    assert ">A=1</textarea>" in form


def field_tag(form: str, field_id: str) -> str:
    """The <input ...> tag of one field of a page."""
    return re.search(rf'<input id="{field_id}"[^>]*>', form, re.S).group(0)


def test_the_submit_form_has_the_scheduling_fields_with_help(
    ui_server: ServerProcess, admin: tuple[httpx.Client, str]
) -> None:
    client, csrf = admin
    form = client.get("/jobs/new").text
    for field_id, label in [
        ("gpu_type", "GPU type"),
        ("max_runtime", "Max runtime"),
        ("grace_period", "Grace period"),
        ("preemptible", "Preemptible"),
    ]:
        assert re.search(rf'<label for="{field_id}">{label}', form), field_id
        assert f'id="{field_id}-help"' in form and f'id="{field_id}-error"' in form, field_id
    assert "checked" in field_tag(form, "preemptible"), "preemptible by default"
    assert '<option value="A100-SXM4-80GB">' in form, "the pool's GPU models are offered"
    assert 'list="gpu-models"' in field_tag(form, "gpu_type")
    assert "Empty: 2s; at most 1h." in form, "the server's default and longest grace period"
    assert 'id="priority-range">-1000 to 1000<' in form and "admins up to" not in form
    assert 'max="1000"' in field_tag(form, "priority")

    write = {"x-csrf-token": csrf}
    bea = {"name": "bea", "role": "member", "teams": ["default"], "password": "bea-secret!"}
    assert client.post("/api/v1/users", json=bea, headers=write).status_code == 201
    with httpx.Client(base_url=ui_server.url, timeout=10) as member:
        signed = member.post("/api/v1/session", json={"user": "bea", "password": "bea-secret!"})
        assert signed.status_code == 200
        form = member.get("/jobs/new").text
        assert 'id="priority-range">-1000 to 100<' in form and "(admins up to 1000)" in form
        assert 'max="100"' in field_tag(form, "priority")
        assert 'data-role="member"' in field_tag(form, "priority")
        too_high = member.post(
            "/api/v1/jobs",
            json={"command": ["true"], "priority": 500},
            headers={"x-csrf-token": signed.json()["csrf_token"]},
        )
        assert too_high.status_code == 403
        assert too_high.json()["error"]["code"] == "priority_not_allowed"


def test_submit_again_keeps_the_scheduling_fields(admin: tuple[httpx.Client, str]) -> None:
    client, csrf = admin
    job = submit(
        client,
        csrf,
        preemptible=False,
        resources={"gpus": 1},
        gpu_types=["A100", "H100"],
        max_runtime_seconds=7200,
        grace_period_seconds=90,
    )
    form = client.get(f"/jobs/new?again={job['id']}").text
    assert 'value="A100, H100"' in field_tag(form, "gpu_type")
    assert 'value="2h"' in field_tag(form, "max_runtime")
    assert 'value="90s"' in field_tag(form, "grace_period")
    assert "checked" not in field_tag(form, "preemptible")
    client.post(f"/api/v1/jobs/{job['id']}/cancel", headers={"x-csrf-token": csrf})


def test_static_files_are_served(ui_server: ServerProcess) -> None:
    for name, kind in [
        ("gpupool.css", "text/css"),
        ("common.js", "javascript"),
        ("job.js", "javascript"),
        ("submit.js", "javascript"),
        ("favicon.svg", "image/svg+xml"),
    ]:
        answer = httpx.get(f"{ui_server.url}/static/{name}")
        assert answer.status_code == 200, name
        assert kind in answer.headers["content-type"], name
    assert httpx.get(f"{ui_server.url}/static/nope.js").status_code == 404


def test_the_ui_loads_nothing_from_outside() -> None:
    """Air-gapped: no CDN, no external font or script, no inline script."""
    files = [*(UI_FILES / "templates").glob("*.html"), *(UI_FILES / "static").glob("*")]
    assert files
    for path in files:
        text = path.read_text()
        assert not re.search(r"(src|href)=\"(https?:)?//", text), path
        assert "@import" not in text and "url(http" not in text, path
        if path.suffix == ".html":
            assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), f"inline script in {path}"


def test_durations_read_in_minutes_and_hours(admin: tuple[httpx.Client, str]) -> None:
    client, csrf = admin
    for seconds, shown in ((301, "5 min"), (7380, "2 h 3 min"), (45, "45 s"), (86400, "1 d")):
        job = submit(client, csrf, command=["true"], max_runtime_seconds=seconds)
        page = client.get(f"/jobs/{job['id']}").text
        assert f"<dt>Max runtime</dt><dd>{shown}</dd>" in page, seconds


def test_a_job_being_stopped_shows_a_stopping_badge(admin: tuple[httpx.Client, str]) -> None:
    """It ignores SIGTERM, so it runs on for its grace period after the cancel."""
    client, csrf = admin
    script = "trap '' TERM; echo up; while :; do sleep 0.1; done"
    job = submit(client, csrf, command=["sh", "-c", script], grace_period_seconds=30)
    running = lambda: client.get(f"/api/v1/jobs/{job['id']}").json()["status"] == "running"  # noqa: E731
    wait_for(running, 60.0, f"job {job['id']} to run", 0.1)
    assert "status-running" in client.get(f"/jobs/{job['id']}").text
    cancelled = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers={"x-csrf-token": csrf})
    assert cancelled.status_code == 200, cancelled.text
    shown = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert shown["status"] == "running" and shown["cancel_requested"]
    for path in (f"/jobs/{job['id']}", "/jobs"):
        page = client.get(path).text
        assert 'class="badge status status-stopping"' in page, path
        assert "</span>stopping</span>" in page, path


@pytest.mark.parametrize("path", ["/no-such-page", "/jobs/1/nope", "/models/a/b/c"])
def test_an_unknown_page_answers_the_not_found_page(
    admin: tuple[httpx.Client, str], ui_server: ServerProcess, path: str
) -> None:
    client, _ = admin
    for answer in (client.get(path), httpx.get(f"{ui_server.url}{path}")):
        assert answer.status_code == 404
        assert answer.headers["content-type"].startswith("text/html")
        assert "<h1" in answer.text and "No page" in answer.text and "Traceback" not in answer.text
    api = client.get("/api/v1/no-such-thing")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"
