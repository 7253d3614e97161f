"""Each single-node workload on a network of its own (issue 23: ports, kernel channels,
direct calls): what a hostile job of the node could do through the node's shared network it
can no longer do, and what the platform asks of the network is refused where it must be.

In-process platform (real database, local executor, bubblewrap sandbox), the proxy of
``tests.support.proxying`` in front of it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.executors.listening import ISOLATED_PORT
from tests.support.platform import create_user, make_settings, refused, running_app, wait_job
from tests.support.proxying import Proxied, proxy_app, served
from tests.support.waiting import wait_for

# holds the port a served workload is given, and a range around it, answering "squatted"
SQUATTER = f"""
import socket, threading, time
held = []
for port in range({ISOLATED_PORT - 5}, {ISOLATED_PORT + 50}):
    try:
        held.append(socket.create_server(("127.0.0.1", port)))
    except OSError:
        pass
def answer(server):
    while True:
        conn, _ = server.accept()
        conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 8\\r\\n\\r\\nsquatted")
        conn.close()
for server in held:
    threading.Thread(target=answer, args=(server,), daemon=True).start()
print("holding", len(held), "ports", flush=True)
time.sleep(120)
"""
# what a job sees of the network: its interfaces, and whether the node's loopback answers
LOOK = """
import json, os, socket, sys
interfaces = sorted(os.listdir("/sys/class/net"))
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    node = "reached"
except OSError as e:
    node = type(e).__name__
print("SEEN=" + json.dumps({"interfaces": interfaces, "node": node}), flush=True)
"""


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    data_dir = tmp_path_factory.mktemp("fence") / "data"
    with running_app(make_settings(data_dir)) as (client, platform):
        token = client.headers["Authorization"].removeprefix("Bearer ")
        with served(proxy_app(platform)) as url:
            yield Proxied(client, platform, url, token, 0)


def test_a_squatter_of_every_port_does_not_get_another_workloads_traffic(
    platform: Proxied,
) -> None:
    client = platform.client
    squatter = _submit(client, [sys.executable, "-c", SQUATTER])
    wait_for(lambda: "holding" in _log(client, squatter), 30, "the squatter to hold its ports")
    echo = platform.start_echo()  # given ISOLATED_PORT on its own loopback, and it binds it
    answer = httpx.get(f"{platform.url}/whole/{echo}/hello", headers=_bearer(platform), timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["path"] == "/hello"  # the echo's own answer, not "squatted"
    found = platform.endpoint(echo)
    assert found is not None and found.socket is not None
    assert found.port == ISOLATED_PORT
    client.post(f"/api/v1/jobs/{squatter}/cancel")
    client.post(f"/api/v1/jobs/{echo}/cancel")


def test_a_job_sees_only_its_own_loopback(platform: Proxied) -> None:
    with _listener() as port:
        job = _submit(platform.client, [sys.executable, "-c", LOOK, str(port)])
        done = wait_job(platform.client, job, timeout=60)
    assert done["status"] == "succeeded", _log(platform.client, job)
    seen = _seen(_log(platform.client, job))
    assert seen["node"] == "ConnectionRefusedError", "the node's loopback is not the job's"
    assert "lo" in seen["interfaces"]


def test_the_nodes_network_is_for_admins_unless_allowed(platform: Proxied) -> None:
    client = platform.client
    member = _member(client, "netuser")
    body = {"command": ["true"], "network": "host"}
    refused(client.post("/api/v1/jobs", json=body, headers=member), 403, "host_network_not_allowed")
    assert client.post("/api/v1/jobs", json=body).status_code == 201  # the admin's own


def test_the_admin_allows_the_nodes_network(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", allow_host_network=True)
    with running_app(settings) as (client, _), _listener() as port:
        member = _member(client, "netuser")
        body = {"command": [sys.executable, "-c", LOOK, str(port)], "network": "host"}
        answer = client.post("/api/v1/jobs", json=body, headers=member)
        assert answer.status_code == 201, answer.text
        job = answer.json()["id"]
        assert wait_job(client, job, timeout=60)["status"] == "succeeded"
        assert _seen(_log(client, job))["node"] == "reached"


def test_a_job_over_several_nodes_cannot_ask_for_a_network_of_its_own(platform: Proxied) -> None:
    body = {"command": ["true"], "nodes": 2, "network": "isolated"}
    refused(platform.client.post("/api/v1/jobs", json=body), 422, "invalid_network")


def _member(client: httpx.Client, name: str) -> dict[str, str]:
    create_user(client, name)
    token = client.post("/api/v1/tokens", json={"user": name, "name": "t"}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _submit(client: httpx.Client, command: list[str], **fields: object) -> int:
    answer = client.post("/api/v1/jobs", json={"command": command, **fields})
    assert answer.status_code == 201, answer.text
    job = answer.json()["id"]
    wait_job(client, job, {"running", "succeeded", "failed"}, timeout=60)
    return job


def _log(client: httpx.Client, job: int) -> str:
    return client.get(f"/api/v1/jobs/{job}/logs").json().get("text", "")


def _seen(log: str) -> dict:
    import json

    return json.loads(log.split("SEEN=")[1].splitlines()[0])


def _bearer(platform: Proxied) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform.token}"}


class _listener:
    """A listener on the node's loopback for the test's span (a service of the node)."""

    def __enter__(self) -> int:
        import socket

        self.server = socket.create_server(("127.0.0.1", 0))
        return self.server.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.server.close()
