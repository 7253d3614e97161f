"""The platform's proxy, attacked: a workload behind it never receives the platform's session
cookie, the caller's API token, the CSRF token or any X-Gpupool header (HTTP and WebSocket),
and cannot set the platform's cookie; a request without credentials is refused (a browser is
sent to sign in); a page of another site cannot use a signed-in user's cookie to change
anything through it or to open a WebSocket; a client cannot forge X-Forwarded-For."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support.platform import refused
from tests.support.proxying import WORKLOAD_HEADERS, Proxied, proxied_echo

CSRF_HEADER = "X-CSRF-Token"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    with proxied_echo(tmp_path_factory.mktemp("proxy-security") / "data") as found:
        yield found


@pytest.fixture(scope="module")
def session(proxied: Proxied) -> tuple[str, str]:
    """A web session of the admin (signed in with its token as password): cookie, CSRF."""
    answer = proxied.client.post(
        "/api/v1/session", json={"user": "admin", "password": proxied.token}
    )
    assert answer.status_code == 200, answer.text
    return answer.cookies["gpupool_session"], answer.json()["csrf_token"]


def job_url(proxied: Proxied, path: str = "/x") -> str:
    return f"{proxied.url}/w/{proxied.job_id}{path}"


def ws_url(proxied: Proxied) -> str:
    return job_url(proxied, "/ws").replace("http://", "ws://")


def platform_headers(proxied: Proxied, cookie: str, csrf: str) -> dict[str, str]:
    """Every credential of the platform at once, with a cookie of the workload's own."""
    return {
        "Authorization": f"Bearer {proxied.token}",
        "Cookie": f"gpupool_session={cookie}; _xsrf=jupyters; other=1",
        CSRF_HEADER: csrf,
        "X-Gpupool-Admin": "yes",
        "X-Forwarded-For": "6.6.6.6",
    }


def assert_no_platform_credentials(said: dict, proxied: Proxied, cookie: str, csrf: str) -> None:
    headers = {name: value for name, value in said["headers"]}
    flat = json.dumps(said)
    for secret in (proxied.token, cookie, csrf):
        assert secret not in flat
    assert "authorization" not in headers and "x-csrf-token" not in headers
    assert not [name for name in headers if name.startswith("x-gpupool")]
    assert said["cookies"] == {"_xsrf": "jupyters", "other": "1"}
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-workload-token"] == WORKLOAD_HEADERS["X-Workload-Token"]


def test_http_carries_no_credential_of_the_platform(
    proxied: Proxied, session: tuple[str, str]
) -> None:
    cookie, csrf = session
    headers = platform_headers(proxied, cookie, csrf)
    for method in ("GET", "POST"):
        answer = httpx.request(method, job_url(proxied), headers=headers, content=b"body")
        assert answer.status_code == 200, answer.text
        assert_no_platform_credentials(answer.json(), proxied, cookie, csrf)


def test_a_websocket_carries_no_credential_of_the_platform(
    proxied: Proxied, session: tuple[str, str]
) -> None:
    cookie, csrf = session
    with connect(ws_url(proxied), additional_headers=platform_headers(proxied, cookie, csrf)) as ws:
        said = json.loads(ws.recv())
    assert_no_platform_credentials(said, proxied, cookie, csrf)


def test_a_workload_cannot_set_the_platforms_cookie(proxied: Proxied) -> None:
    bearer = {"Authorization": f"Bearer {proxied.token}"}
    answer = httpx.get(job_url(proxied, "/set-cookies"), headers=bearer)
    own = f"/w/{proxied.job_id}/"  # its cookie stays under its own path (test_cookies.py)
    assert answer.headers.get_list("set-cookie") == [f"theirs=kept; Path={own}"]


def test_without_credentials_nothing_reaches_the_workload(proxied: Proxied) -> None:
    refused(httpx.get(job_url(proxied)), 401, "unauthenticated")
    unknown = {"Authorization": "Bearer gp_not-a-token"}
    refused(httpx.get(job_url(proxied), headers=unknown), 401, "unauthenticated")
    forged = {"Cookie": "gpupool_session=forged"}
    refused(httpx.post(job_url(proxied), headers=forged), 401, "unauthenticated")
    page = httpx.get(job_url(proxied, "/lab?a=1"), headers={"Accept": "text/html"})
    assert page.status_code == 303
    assert page.headers["location"] == f"/login?next=/w/{proxied.job_id}/lab%3Fa%3D1"
    with pytest.raises(InvalidStatus) as denied:
        connect(ws_url(proxied))
    assert denied.value.response.status_code == 401


def test_another_site_cannot_use_a_signed_in_users_cookie(
    proxied: Proxied, session: tuple[str, str]
) -> None:
    cookie = {"Cookie": f"gpupool_session={session[0]}"}
    own = proxied.url
    assert httpx.get(job_url(proxied), headers=cookie).status_code == 200  # reading: allowed
    for origin in (None, "https://evil.example", "null"):
        sent = cookie | ({"Origin": origin} if origin else {})
        refused(httpx.post(job_url(proxied), headers=sent), 403, "csrf_failed")
        with pytest.raises(InvalidStatus) as denied:
            connect(ws_url(proxied), additional_headers=cookie, origin=origin)
        assert denied.value.response.status_code == 403
    cross_site = cookie | {"Origin": own, "Sec-Fetch-Site": "cross-site"}
    refused(httpx.post(job_url(proxied), headers=cross_site), 403, "csrf_failed")
    same = cookie | {"Origin": own}
    assert httpx.post(job_url(proxied), headers=same).status_code == 200
    with connect(ws_url(proxied), additional_headers=cookie, origin=own) as ws:
        assert json.loads(ws.recv())["path"] == "/ws"
