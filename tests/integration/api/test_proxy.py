"""A job that listens (``listen``) gets a port, ``endpoint_of`` finds it, and the platform's
Proxy reaches it: HTTP bodies both ways, an answer streamed as it comes, WebSockets (text,
binary, subprotocol, close code), and a 502 once the workload is gone. One platform and echo
job for the module (tests/support/proxying.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from gpupool.domain.jobs import JobKind, JobSpec, JobStatus
from gpupool.proxy import client_via
from gpupool.services import identity, jobs
from gpupool.services.jobs import endpoints_of
from gpupool.store.models import AttemptModel
from tests.support.platform import refused, wait_job
from tests.support.proxying import MAX_BODY_BYTES, Proxied, proxied_echo
from tests.support.server import free_port
from tests.support.workloads import node_listeners


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    with proxied_echo(tmp_path_factory.mktemp("proxy") / "data") as found:
        yield found


@pytest.fixture
def web(proxied: Proxied) -> Iterator[httpx.Client]:
    """A client of the tiny app, with the admin's API token."""
    bearer = {"Authorization": f"Bearer {proxied.token}"}
    with httpx.Client(base_url=f"{proxied.url}/w/{proxied.job_id}", headers=bearer) as client:
        yield client


def test_a_listening_job_is_told_its_port_and_endpoint_of_finds_it(proxied: Proxied) -> None:
    found = proxied.endpoint()
    assert found is not None and found.host == "127.0.0.1" and found.socket is not None
    with client_via(found.via, 5) as client:  # the workload itself, through its runner's socket
        said = client.get(f"{found.url}/hello").json()
    assert said["port"] == str(found.port) and said["listen_host"] == "127.0.0.1"
    with proxied.platform.db.reader() as session:
        state = session.query(AttemptModel).filter_by(job_id=proxied.job_id).one().executor_state
        # its own loopback: none of its processes listens on the node's (where anything
        # else of the machine may hold that port, so asking there proves nothing)
        assert _node_listeners_of(state["state"]["attempt_dir"], found.port) == []
        assert state["state"]["port"] == found.port  # kept for a restarted server
        assert endpoints_of(session, proxied.platform.executor, [proxied.job_id, 999]) == {
            proxied.job_id: found
        }
    job = proxied.client.get(f"/api/v1/jobs/{proxied.job_id}").json()
    assert job["spec"]["listen"] is True and job["kind"] == "job"


def test_a_job_submitted_for_a_notebook_shows_its_kind(proxied: Proxied) -> None:
    """Notebooks and deployments submit their workloads through the jobs' own submit."""
    who = identity.by_token(proxied.platform, proxied.token, "127.0.0.1")
    spec = JobSpec(command=["true"], name="lab")
    job_id = jobs.submit_job(proxied.platform, who, spec, kind=JobKind.NOTEBOOK).id
    assert proxied.client.get(f"/api/v1/jobs/{job_id}").json()["kind"] == "notebook"
    every = {"status": [status.value for status in JobStatus]}
    listed = proxied.client.get("/api/v1/jobs", params=every).json()
    kinds = {job["id"]: job["kind"] for job in listed}
    assert (kinds[job_id], kinds[proxied.job_id]) == ("notebook", "job")


def test_requests_reach_the_workload_with_their_path_query_and_body(web: httpx.Client) -> None:
    said = web.get("/some/path", params={"q": "1"}).json()
    assert (said["method"], said["path"], said["query"]) == ("GET", "/some/path", "q=1")
    body = "x" * MAX_BODY_BYTES
    said = web.post("/upload", content=body, headers={"content-type": "text/plain"}).json()
    assert said["method"] == "POST" and said["body"] == body
    streamed = web.put("/chunks", content=iter([b"one,", b"two,", b"three"])).json()
    assert streamed["body"] == "one,two,three"  # a chunked body, passed on as it came


def test_a_body_over_the_proxys_limit_is_refused(web: httpx.Client) -> None:
    over = b"x" * (MAX_BODY_BYTES + 1)
    refused(web.post("/upload", content=over), 413, "payload_too_large")
    chunks = iter([over[:1024], over[1024:]])  # no length said: counted as it comes
    refused(web.put("/upload", content=chunks), 413, "payload_too_large")


def test_an_answer_is_passed_on_as_it_comes(web: httpx.Client) -> None:
    """The workload sends its last line only after /release: the first must arrive before."""
    with web.stream("GET", "/stream") as answer:
        lines = answer.iter_lines()
        assert next(lines) == "first"
        assert web.get("/release").text == "released"
        assert list(lines) == ["last"]


@pytest.fixture
def whole(proxied: Proxied) -> Iterator[httpx.Client]:
    """A client of the job as /serve reaches a replica: small answers passed on whole."""
    with httpx.Client(base_url=f"{proxied.url}/whole/{proxied.job_id}") as client:
        yield client


def test_a_small_answer_is_passed_on_whole_as_the_workload_sent_it(whole: httpx.Client) -> None:
    said = whole.post("/sized", params={"q": "1"}, json={"inputs": [1]})
    assert said.status_code == 200 and said.headers["content-length"] == str(len(said.content))
    assert "transfer-encoding" not in said.headers
    assert (said.json()["path"], said.json()["query"]) == ("/sized", "q=1")
    assert said.json()["body"] == '{"inputs":[1]}'
    zipped = whole.get("/gzip")  # undecoded: its Content-Length is the zipped size
    assert zipped.headers["content-encoding"] == "gzip" and zipped.text == "zipped " * 100
    assert int(zipped.headers["content-length"]) < len(zipped.text)
    head = whole.head("/sized")
    assert head.status_code == 200 and head.content == b"" and "content-length" in head.headers


def test_an_answer_passed_on_whole_keeps_the_platforms_cookie_out(whole: httpx.Client) -> None:
    answer = whole.get("/set-cookies")
    own = whole.base_url.path  # /whole/ID/: a workload's cookie stays under its own path
    assert answer.headers.get_list("set-cookie") == [f"theirs=kept; Path={own}"]
    assert whole.get("/redirect").headers["location"] == "/landed?x=1"


def test_an_answer_of_unsaid_length_is_still_streamed(whole: httpx.Client) -> None:
    with whole.stream("GET", "/stream") as answer:
        lines = answer.iter_lines()
        assert next(lines) == "first"
        assert whole.get("/release").text == "released"
        assert list(lines) == ["last"]


def test_a_workloads_own_502_is_told_apart_from_the_proxys(proxied: Proxied) -> None:
    """/serve sends a request to the next replica after the proxy's 502, never after the
    replica's own."""
    own = httpx.get(f"{proxied.url}/whole/{proxied.job_id}/own-502")
    assert own.status_code == 502 and own.text == "the workload's own 502"
    assert "x-proxy-made" not in own.headers
    gone = httpx.get(f"{proxied.url}/port/{free_port()}/x")
    assert gone.status_code == 502 and gone.json()["error"]["code"] == "upstream_unavailable"
    assert gone.headers["x-proxy-made"] == "1"


def test_a_redirect_to_the_workloads_own_address_becomes_a_path(web: httpx.Client) -> None:
    answer = web.get("/redirect")
    assert answer.status_code == 302
    assert answer.headers["location"] == "/landed?x=1"


def test_a_websocket_passes_text_binary_its_subprotocol_and_close_code(proxied: Proxied) -> None:
    url = f"{proxied.url.replace('http', 'ws')}/w/{proxied.job_id}/kernel?session=7"
    bearer = {"Authorization": f"Bearer {proxied.token}"}
    with connect(url, additional_headers=bearer, subprotocols=["v1.echo", "v0"]) as ws:
        assert ws.subprotocol == "v1.echo"
        hello = httpx.Response(200, content=ws.recv()).json()
        assert (hello["path"], hello["query"]) == ("/kernel", "session=7")
        ws.send("text message")
        assert ws.recv() == "text message"
        ws.send(b"\x00\x01binary\xff")
        assert ws.recv() == b"\x00\x01binary\xff"
        ws.send("close:4001")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001


def test_a_workload_that_is_gone_answers_502(proxied: Proxied) -> None:
    job_id = proxied.start_echo()
    assert proxied.endpoint(job_id) is not None
    assert proxied.client.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    wait_job(proxied.client, job_id, {"cancelled"})
    assert proxied.endpoint(job_id) is None
    bearer = {"Authorization": f"Bearer {proxied.token}"}
    refused(httpx.get(f"{proxied.url}/w/{job_id}/x", headers=bearer), 404, "not_found")
    # nothing listens there: a free port of the node (the workload's own port, 8000, was
    # on its own loopback; on the node's, another test's job may hold it)
    refused(httpx.get(f"{proxied.url}/port/{free_port()}/x"), 502, "upstream_unavailable")
    with pytest.raises(InvalidStatus) as denied:
        connect(f"{proxied.url.replace('http', 'ws')}/port/{free_port()}/ws")
    assert denied.value.response.status_code == 502


def _node_listeners_of(attempt_dir: str, port: int) -> list[int]:
    """Pids of the job's processes that listen on ``port`` in the node's own network
    namespace (the test's)."""
    record = json.loads((Path(attempt_dir) / "state.json").read_text())
    workload = psutil.Process(record["pid"])
    return node_listeners({workload.pid, *(c.pid for c in workload.children(recursive=True))}, port)
