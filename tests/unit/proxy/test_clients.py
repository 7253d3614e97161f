"""The clients the pipelines reach workloads with: over plain HTTP, without loading the CA
store for each (17 ms of CPU a client: a health check every two seconds per replica), and
failing closed should a URL ever be https."""

from __future__ import annotations

import http.server
import os
import socketserver
import ssl
import threading
from pathlib import Path

import httpx
import pytest

from gpupool.proxy import PLAIN_HTTP, client_via


def test_the_shared_context_trusts_no_one() -> None:
    assert PLAIN_HTTP.verify_mode == ssl.CERT_REQUIRED and PLAIN_HTTP.check_hostname
    assert PLAIN_HTTP.cert_store_stats()["x509_ca"] == 0  # nothing loaded: nothing trusted


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the handler's protocol
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def test_a_client_through_a_runners_socket_gets_its_answer(tmp_path: Path) -> None:
    path = str(tmp_path / "listen.sock")
    server = _UnixServer(path, _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with client_via(path, 5) as client:
            answer = client.get("http://127.0.0.1:8000/")
        assert (answer.status_code, answer.text) == (200, "hello")
    finally:
        server.shutdown()
        server.server_close()
        os.unlink(path)


def test_an_https_url_fails_its_handshake_rather_than_trusting_anything() -> None:
    with socketserver.TCPServer(("127.0.0.1", 0), _Hello) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with client_via(None, 5) as client, pytest.raises(httpx.ConnectError):
                client.get(f"https://127.0.0.1:{server.server_address[1]}/")
        finally:
            server.shutdown()
