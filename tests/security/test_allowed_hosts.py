"""The server answers only to its own names: a request whose Host header names another (a
page of another site whose name was pointed at 127.0.0.1: DNS rebinding) gets a 400."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDisconnect
from starlette.types import Receive, Scope, Send

from gpupool.api.limits import AllowedHosts
from gpupool.settings import WILDCARD_ADDRESSES
from tests.support.platform import make_settings, refused, running_app
from tests.support.server import ServerProcess

PUBLIC = "https://gpu.example.com"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server (no 'testserver' here: the product's own defaults) with a public URL
    and one extra allowed name."""
    env = {
        "GPUPOOL_PUBLIC_URL": PUBLIC,
        "GPUPOOL_ALLOWED_HOSTS": "pool.internal, Other.Lan",
        "GPUPOOL_SIGNIN_MAX_PER_ADDRESS": "2",  # (the forged X-Forwarded-For test)
    }
    process = ServerProcess(tmp_path_factory.mktemp("hosts") / "data", env=env).start()
    yield process
    process.stop()


def health(server: ServerProcess, host: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/v1/health", headers={"Host": host}, timeout=10)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "LOCALHOST",
        "[::1]:{port}",
        "gpu.example.com",  # the public URL's host (a proxy in front keeps the name)
        "gpu.example.com:443",
        "pool.internal:{port}",  # GPUPOOL_ALLOWED_HOSTS
        "other.lan",
    ],
)
def test_the_servers_own_names_are_answered(server: ServerProcess, host: str) -> None:
    assert health(server, host.format(port=server.port)).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "testserver", "[::2]"],
)
def test_another_name_is_refused(server: ServerProcess, host: str) -> None:
    error = refused(health(server, host.format(port=server.port)), 400, "host_not_allowed")
    assert "GPUPOOL_ALLOWED_HOSTS" in error["message"]


def test_pages_and_sign_in_are_refused_too(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, headers={"Host": "evil.example"}) as evil:
        refused(evil.get("/login"), 400, "host_not_allowed")
        body = {"user": "admin", "password": server.token}
        refused(evil.post("/api/v1/session", json=body), 400, "host_not_allowed")


def test_x_forwarded_for_does_not_choose_the_address_that_is_throttled(
    server: ServerProcess,
) -> None:
    """Every local client connects from 127.0.0.1: the server behind uvicorn must not take the
    address a request names in X-Forwarded-For (uvicorn's default trusts it from there)."""
    answers = [
        httpx.post(
            f"{server.url}/api/v1/session",
            json={"user": f"nobody{n}", "password": "guess"},
            headers={"X-Forwarded-For": f"192.0.2.{n}"},
            timeout=30,
        )
        for n in range(3)
    ]
    assert [a.status_code for a in answers] == [401, 401, 429], [a.text for a in answers]


def test_the_bound_address_is_allowed_and_any_address_is_not(tmp_path: Path) -> None:
    assert "10.1.2.3" in make_settings(tmp_path, host="10.1.2.3").host_names()
    for wildcard in WILDCARD_ADDRESSES - {""}:  # settings only: nothing binds here
        assert wildcard not in make_settings(tmp_path, host=wildcard).host_names()


def test_the_in_process_app_refuses_other_hosts_as_well(tmp_path: Path) -> None:
    with running_app(make_settings(tmp_path / "data")) as (client, _platform):
        assert client.get("/api/v1/whoami").status_code == 200  # 'testserver', allowed in tests
        answer = client.get("/api/v1/whoami", headers={"Host": "evil.example"})
        refused(answer, 400, "host_not_allowed")


async def _echo(scope: Scope, receive: Receive, send: Send) -> None:
    """A websocket that accepts, says hello and closes."""
    await receive()
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": "hello"})
    await send({"type": "websocket.close", "code": 1000})


def test_a_websocket_from_another_host_is_closed_before_it_opens() -> None:
    client = TestClient(AllowedHosts(_echo, frozenset({"testserver"})))
    with client.websocket_connect("/") as socket:
        assert socket.receive_text() == "hello"
    with (
        pytest.raises(WebSocketDisconnect) as closed,
        client.websocket_connect("/", headers={"Host": "evil.example"}),
    ):
        pass
    assert closed.value.code == 1008
