"""HTTP/1.1 to one gpupool server over the standard library's ``http.client``.

A CLI call makes one to a few requests to one server, and every call pays for the imports
of its HTTP stack: httpx costs about 70 ms of them, ``http.client`` a third of that
(benchmarks/cli_startup.py). One kept-alive connection serves the requests of a client.
Environment proxies (HTTP_PROXY, ...) are not used: a pool is reached directly.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlencode, urlsplit

import gpupool

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})  # safe to send again


class TransportError(Exception):
    """No answer from the server: ``code`` says why (server_unreachable, server_timeout)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class Response:
    """A whole answer: its status, reason phrase and body."""

    status: int
    reason: str
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass(frozen=True)
class Upload:
    """A request body read from a file (a code snapshot): sent in blocks, never held whole."""

    file: BinaryIO
    size: int
    content_type: str = "application/octet-stream"

    def headers(self) -> dict[str, str]:
        return {"Content-Type": self.content_type, "Content-Length": str(self.size)}


class Transport:
    """Requests to the server at ``url`` (http or https), to paths below ``prefix``, with
    fixed headers, over one connection: one thread at a time, as a CLI command makes them."""

    def __init__(self, url: str, prefix: str, headers: dict[str, str], timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"'{url}' is not an http:// or https:// URL")
        self.url, self.timeout = url, timeout
        self.secure, self.host = parts.scheme == "https", parts.hostname
        self.port = parts.port or (443 if self.secure else 80)  # given: no guess at "::1"
        self.prefix = parts.path.rstrip("/") + prefix
        self.headers = {"Accept": "application/json", "User-Agent": _agent()} | headers
        self._connection: http.client.HTTPConnection | None = None

    def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
        upload: Upload | None = None,
    ) -> Response:
        """Send one request and read the whole answer; TransportError when none comes.

        An idempotent request that finds its kept-alive connection closed by the server at
        that moment (its idle timeout) is sent once more, on a new connection."""
        query = urlencode(_query(params or {}), doseq=True)
        target = self.prefix + path + (f"?{query}" if query else "")
        body, headers = None, self.headers
        if json is not None:
            body = _dumps(json)
            headers = headers | {"Content-Type": "application/json"}
        elif upload is not None:
            body, headers = upload, headers | upload.headers()
        try:
            return self._send(method, target, body, headers)
        except (OSError, http.client.HTTPException) as error:
            self.close()
            raise self._problem(error) from error

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _send(
        self, method: str, target: str, body: bytes | Upload | None, headers: dict[str, str]
    ) -> Response:
        reused = self._connection is not None and not _hung_up(self._connection)
        try:
            return self._exchange(method, target, body, headers)
        except ConnectionError:  # reset, or closed before any answer
            if not reused or method not in IDEMPOTENT:
                raise
        self.close()
        return self._exchange(method, target, body, headers)

    def _exchange(
        self, method: str, target: str, body: bytes | Upload | None, headers: dict[str, str]
    ) -> Response:
        connection = self._connect()
        if isinstance(body, Upload):
            body.file.seek(0)  # from its start, also when sent again on a new connection
            connection.request(method, target, body=body.file, headers=headers)
        else:
            connection.request(method, target, body=body, headers=headers)
        answer = connection.getresponse()
        response = Response(answer.status, answer.reason, answer.read())
        if answer.will_close:
            self.close()
        return response

    def _connect(self) -> http.client.HTTPConnection:
        """The kept-alive connection if the server has not closed it meanwhile, else a new one."""
        if self._connection is not None and not _hung_up(self._connection):
            return self._connection
        self.close()
        kind = http.client.HTTPSConnection if self.secure else http.client.HTTPConnection
        self._connection = kind(self.host, self.port, timeout=self.timeout)
        return self._connection

    def _problem(self, error: Exception) -> TransportError:
        if isinstance(error, TimeoutError):
            return TransportError(
                "server_timeout",
                f"the gpupool server at {self.url} did not answer within {self.timeout:g} s: "
                "it may be overloaded; try again, or check its log",
            )
        return TransportError(
            "server_unreachable",
            f"no gpupool server answers at {self.url} ({_reason(error)}): start it with "
            "`gpupool server` (or `make serve`) or log in to another with `gpupool login URL`",
        )


def _hung_up(connection: http.client.HTTPConnection) -> bool:
    """True when an idle kept-alive connection has something to read: the server's close."""
    if connection.sock is None:
        return False
    poller = select.poll()
    poller.register(connection.sock, select.POLLIN)
    return bool(poller.poll(0))


def _reason(error: Exception) -> str:
    """'connection refused', 'unknown host' ...: the cause in a few words."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, socket.gaierror):
        return "unknown host"
    if isinstance(error, (ConnectionError, http.client.HTTPException)):
        return "the connection was dropped"
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _query(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as the server parses them: booleans 'true'/'false', None left out."""
    return {
        key: (str(value).lower() if isinstance(value, bool) else value)
        for key, value in params.items()
        if value is not None
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _agent() -> str:
    return f"gpupool-client/{gpupool.__version__}"
