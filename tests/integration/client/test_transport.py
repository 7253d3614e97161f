"""The client's HTTP transport against a real HTTP server on 127.0.0.1: one kept-alive
connection, replaced when the server has closed it; a server that does not answer is named;
answers of every framing read whole; https over TLS, its certificate checked."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpupool.client.transport import Transport, TransportError
from tests.support.server import free_port


class Echo(BaseHTTPRequestHandler):
    """Answers what it was sent, and from which client port; /bye then closes silently, a POST
    to /drop is counted and dropped unanswered."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.answer(b"")

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.endswith("/drop"):
            self.server.dropped.append(body)  # type: ignore[attr-defined]
            self.close_connection = True
            return
        self.answer(body)

    def answer(self, body: bytes) -> None:
        sent = {
            "path": self.path,
            "port": self.client_address[1],
            "authorization": self.headers.get("Authorization"),
            "content_type": self.headers.get("Content-Type"),
            "body": body.decode(),
        }
        data = json.dumps(sent).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = self.path.endswith("/bye")  # without saying so

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.dropped = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_requests_share_one_connection(url: str) -> None:
    transport = Transport(url, "/api/v1", {"Authorization": "Bearer t"}, timeout=10)
    params = {"status": ["pending", "running"], "all": True, "team": None}
    first = transport.request("GET", "/jobs", params=params).json()
    assert first["path"] == "/api/v1/jobs?status=pending&status=running&all=true"
    assert first["authorization"] == "Bearer t"
    second = transport.request("POST", "/jobs", json={"command": ["true"]})
    assert second.status == 200
    assert second.json()["port"] == first["port"]
    assert json.loads(second.json()["body"]) == {"command": ["true"]}
    assert second.json()["content_type"] == "application/json"
    transport.close()


def test_a_connection_the_server_closed_is_replaced(url: str) -> None:
    transport = Transport(url, "", {}, timeout=10)
    before = transport.request("GET", "/bye").json()["port"]
    after = transport.request("GET", "/again").json()["port"]
    assert after != before
    transport.close()


def test_a_dropped_post_is_not_sent_again(url: str, server: ThreadingHTTPServer) -> None:
    transport = Transport(url, "", {}, timeout=10)
    transport.request("GET", "/first")
    with pytest.raises(TransportError) as raised:
        transport.request("POST", "/drop", json={"submit": 1})
    assert raised.value.code == "server_unreachable"
    assert "the connection was dropped" in raised.value.message
    assert server.dropped == [b'{"submit":1}']  # type: ignore[attr-defined]


def test_a_server_that_does_not_listen_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TransportError) as raised:
        Transport(url, "/api/v1", {}, timeout=10).request("GET", "/jobs")
    assert raised.value.code == "server_unreachable"
    assert f"no gpupool server answers at {url} (connection refused)" in raised.value.message


def test_a_server_that_does_not_answer_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(TransportError) as raised:
            Transport(url, "", {}, timeout=0.2).request("GET", "/")
    assert raised.value.code == "server_timeout"


def test_only_http_urls_are_taken() -> None:
    with pytest.raises(ValueError, match="not an http:// or https:// URL"):
        Transport("ftp://host", "", {}, timeout=1)


# -- answers framed every way HTTP/1.1 allows, and TLS ----------------------------------------


class Framed(BaseHTTPRequestHandler):
    """/chunked answers in chunks (with a trailer), /until-close with no length (HTTP/1.0),
    /empty with 204; every answer names the request's method, Host and Content-Length."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        said = (f"{self.command} {self.headers['Host']} {self.headers['Content-Length']}").encode()
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (said, b" and more"):
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nTrailer: x\r\n\r\n")
        elif self.path == "/until-close":
            self.protocol_version = "HTTP/1.0"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(said)
            self.close_connection = True
        elif self.path == "/empty":
            self.send_response(204)
            self.end_headers()
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(said)))
            self.end_headers()
            if self.command != "HEAD":  # its length said, no body
                self.wfile.write(said)

    do_DELETE = do_POST = do_HEAD = do_GET  # noqa: N815

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def framed() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Framed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_answers_of_every_framing_are_read_whole(framed: ThreadingHTTPServer) -> None:
    port = framed.server_address[1]
    transport = Transport(f"http://127.0.0.1:{port}", "", {}, timeout=10)
    host = f"127.0.0.1:{port}"
    assert transport.request("GET", "/chunked").text == f"GET {host} None and more"
    first = transport.request("GET", "/until-close")
    assert (first.status, first.text) == (200, f"GET {host} None")
    empty = transport.request("GET", "/empty")
    assert (empty.status, empty.content) == (204, b"")
    assert transport.request("HEAD", "/").content == b""
    assert transport.request("POST", "/").text == f"POST {host} 0"  # an empty body is said
    assert transport.request("DELETE", "/").text == f"DELETE {host} None"
    transport.close()


def test_a_header_that_would_break_the_request_is_refused(url: str) -> None:
    transport = Transport(url, "", {"Authorization": "Bearer t\r\nX-Evil: 1"}, timeout=10)
    with pytest.raises(ValueError, match="Invalid header value"):
        transport.request("GET", "/jobs")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_an_https_server_is_reached_over_tls_and_its_certificate_checked(
    tmp_path: Path, framed: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    framed.socket = context.wrap_socket(framed.socket, server_side=True)
    url = f"https://localhost:{framed.server_address[1]}"
    with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
        Transport(url, "", {}, timeout=10).request("GET", "/")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    transport = Transport(url, "", {}, timeout=10)
    assert transport.request("GET", "/").text == f"GET localhost:{framed.server_address[1]} None"
    assert transport.request("GET", "/chunked").status == 200
    transport.close()
