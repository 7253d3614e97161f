"""Cookies, attacked: a workload behind the proxy (a listening job, as a notebook is reached)
cannot set a cookie that applies beyond the path it is reached under (so none reaches another
workload's pages or shadows the platform's), cannot choose its Domain or Priority, cannot set
the platform's cookie (not even as a nameless cookie, which a browser sends back as its bare
value), nor flood a browser's jar to evict the platform's cookie; over https the platform's
session cookie is a ``__Host-`` cookie, read under that name only, and a browser keeps it
when a workload fills its jar. (A deployment's replica sets no cookie at all:
tests/security/test_deployments.py.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.api.routers import session
from tests.support.chromium import NEEDS_CHROMIUM, launched
from tests.support.platform import make_settings, running_app
from tests.support.proxying import Proxied, proxy_app, served

MAX_SET_COOKIES = 20  # a workload's Set-Cookie headers per answer (docs/security.md)
BROWSER, WITH_CHROMIUM = NEEDS_CHROMIUM  # the marks of a test that drives chromium


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    """An echo job behind the proxy's test app (tests/support/proxying.py), which also
    serves the platform's own sign-in route, so that a browser holds the real cookie."""
    data = tmp_path_factory.mktemp("cookies-security") / "data"
    with running_app(make_settings(data)) as (client, platform):
        token = client.headers["Authorization"].removeprefix("Bearer ")
        app = proxy_app(platform)
        app.include_router(session.router, prefix="/api/v1")
        with served(app) as url:
            found = Proxied(client, platform, url, token, 0)
            found.job_id = found.start_echo()
            yield found


def set_cookies(proxied: Proxied, *cookies: str, many: int = 0) -> list[str]:
    """The ``Set-Cookie`` headers that reach the client when the workload sends ``cookies``
    and ``many`` more."""
    query = [("c", cookie) for cookie in cookies] + [("n", str(many))]
    bearer = {"Authorization": f"Bearer {proxied.token}"}
    answer = httpx.get(f"{proxied.url}/w/{proxied.job_id}/cookies", params=query, headers=bearer)
    assert answer.status_code == 200, answer.text
    return answer.headers.get_list("set-cookie")


def test_a_workloads_cookies_stay_under_its_own_path(proxied: Proxied) -> None:
    own = f"/w/{proxied.job_id}/"
    got = set_cookies(
        proxied,
        "wide=1; Path=/; HttpOnly",
        f"deep=2; Path={own}lab; SameSite=Lax",
        "elsewhere=3; path=/notebooks/1/",
        f"twice=4; Path={own}x; Path=/",  # a browser takes the last Path
        "domain=5; Domain=127.0.0.1; Max-Age=60",
        "high=6; Priority=High",
        "__Host-mine=7; Path=/; Secure",  # needs Path=/: it cannot be confined
        "__host-lower=8; Path=/; Secure",
        "=gpupool_session=forged; Path=/",  # nameless: sent back as gpupool_session=forged
        "gpupool_session=forged; Path=/",
        "__Host-gpupool_session=forged; Path=/; Secure",
    )
    assert got == [
        f"wide=1; HttpOnly; Path={own}",
        f"deep=2; SameSite=Lax; Path={own}lab",
        f"elsewhere=3; Path={own}",
        f"twice=4; Path={own}",
        f"domain=5; Max-Age=60; Path={own}",
        f"high=6; Path={own}",
    ]


def test_a_cookie_in_utf8_passes_byte_for_byte(proxied: Proxied) -> None:
    """httpx reads a workload's headers as UTF-8 where they are: the proxy passes on their
    bytes (it failed with a 500 to encode them back)."""
    assert set_cookies(proxied, "city=Z\u00fcrich \u20ac") == [
        f"city=Z\u00fcrich \u20ac; Path=/w/{proxied.job_id}/"
    ]


def test_a_workload_cannot_flood_a_browsers_cookie_jar(
    proxied: Proxied, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gpupool.proxy._forward"):
        got = set_cookies(proxied, many=200)
    assert len(got) == MAX_SET_COOKIES
    assert all(cookie.endswith(f"; Path=/w/{proxied.job_id}/") for cookie in got), got
    assert f"{200 - MAX_SET_COOKIES} Set-Cookie headers over the {MAX_SET_COOKIES}" in caplog.text


@BROWSER
@WITH_CHROMIUM
def test_a_browser_keeps_its_session_when_a_workload_fills_its_jar(proxied: Proxied) -> None:
    """15 answers of 20 new cookies each (and 100 more, cut by the proxy): past its ~180 per
    host, chromium drops cookies, and keeps the platform's (Priority=High; the workload's have
    none) so that its user stays signed in."""
    own = f"{proxied.url}/w/{proxied.job_id}"
    with launched() as browser:
        page = browser.new_page()  # type: ignore[attr-defined]
        page.goto(f"{own}/page")  # 401 without a session: an origin to run scripts on
        signed = page.evaluate(SIGN_IN, {"user": "admin", "password": proxied.token})
        assert signed == 200
        statuses = page.evaluate(FLOOD, {"url": f"{own}/cookies", "answers": 15, "each": 20})
        assert statuses == [200] * 15
        assert len(page.context.cookies()) > 150  # the jar was full
        assert page.evaluate("async url => (await fetch(url)).status", f"{own}/said") == 200


SIGN_IN = """async body => (await fetch("/api/v1/session", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
})).status"""
FLOOD = """async ({url, answers, each}) => {
    const statuses = [];
    for (let a = 0; a < answers; a++) {
        const query = new URLSearchParams({n: "100"});
        for (let c = 0; c < each; c++) query.append("c", `flood-${a}-${c}=1; Path=/`);
        statuses.push((await fetch(`${url}?${query}`)).status);
    }
    return statuses;
}"""


def test_over_https_the_session_cookie_is_a_host_cookie(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", public_url="https://gpu.example.com")
    with running_app(settings) as (client, _):
        token = client.headers.pop("Authorization").removeprefix("Bearer ")
        signed = client.post("/api/v1/session", json={"user": "admin", "password": token})
        assert signed.status_code == 200, signed.text
        name, secret, attributes = _parsed(signed.headers["set-cookie"])
        assert name == "__Host-gpupool_session"
        assert attributes == {"path": "/", "secure": "", "httponly": "", "samesite": "Strict"} | {
            "priority": "High",
            "max-age": attributes["max-age"],
        }
        client.cookies.clear()  # sent as the browser would: by the test, over plain http
        cookie = {"Cookie": f"__Host-gpupool_session={secret}"}
        assert client.get("/api/v1/whoami", headers=cookie).json()["user"] == "admin"
        plain = {"Cookie": f"gpupool_session={secret}"}  # a name no browser guards
        assert client.get("/api/v1/whoami", headers=plain).status_code == 401
        csrf = {"X-CSRF-Token": signed.json()["csrf_token"]}
        out = client.delete("/api/v1/session", headers=cookie | csrf)
        assert out.status_code == 204, out.text
        assert _parsed(out.headers["set-cookie"])[:2] == ("__Host-gpupool_session", '""')
        assert "secure" in _parsed(out.headers["set-cookie"])[2]  # else a browser ignores it


def test_over_http_the_session_cookie_is_plain_and_kept_high(tmp_path: Path) -> None:
    """Safari takes no Secure cookie over http, loopback included: the plain name there (no
    workload's cookie can shadow it: see above)."""
    with running_app(make_settings(tmp_path / "data")) as (client, _):
        token = client.headers.pop("Authorization").removeprefix("Bearer ")
        signed = client.post("/api/v1/session", json={"user": "admin", "password": token})
        name, _, attributes = _parsed(signed.headers["set-cookie"])
        assert name == "gpupool_session"
        assert "secure" not in attributes and attributes["priority"] == "High"
        assert attributes["path"] == "/" and "domain" not in attributes


def _parsed(set_cookie: str) -> tuple[str, str, dict[str, str]]:
    """A Set-Cookie header's name, value and attributes (names in lower case)."""
    pair, *rest = set_cookie.split(";")
    name, _, value = pair.strip().partition("=")
    attributes = {}
    for attribute in rest:
        key, _, attribute_value = attribute.strip().partition("=")
        attributes[key.lower()] = attribute_value
    return name, value, attributes
