"""HTTP/1.1 to one gpupool server over a socket of the standard library.

A CLI call makes one to a few requests to one server, and every call pays for the imports
of its HTTP stack: httpx costs about 70 ms of them, ``http.client`` 14 ms (it loads ``ssl``
and the ``email`` parser, whatever the URL). This module writes and reads what a gpupool
server and client exchange of HTTP/1.1, as ``http.client`` does (a request whose body's
length is known; an answer of known length, chunked, or read until the server closes), and
loads ``ssl`` for an https URL only (benchmarks/cli_startup.py has the figures). One
kept-alive connection serves the requests of a client. Environment proxies (HTTP_PROXY, ...)
are not used: a pool is reached directly.
"""

from __future__ import annotations

import json
import re
import select
import socket
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlencode, urlsplit

import gpupool

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})  # safe to send again
WITH_BODY = frozenset({"PATCH", "POST", "PUT"})  # sent with Content-Length: 0 when empty
BLOCK = 64 * 1024  # bytes of an upload sent at a time
MAX_LINE = 65536  # bytes of a status, header or chunk-size line (http.client's limit)
MAX_HEADERS = 100  # header lines of an answer (http.client's limit)
# what http.client refuses to write: in a request's target, in a header's name or value
UNSAFE_TARGET = re.compile("[\x00-\x20\x7f]")
LEGAL_NAME = re.compile(rb"[^:\s][^:\r\n]*")
ILLEGAL_VALUE = re.compile(rb"\n(?![ \t])|\r(?![ \t\n])")


class ProtocolError(Exception):
    """A request this transport will not write (a target with a space or a control
    character), or an answer it cannot read: not HTTP/1.x, or cut short."""


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
        self._connection: Connection | None = None

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
        except (OSError, ProtocolError) as error:
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
        connection.send(method, target, body, headers)
        response, will_close = connection.answer(method)
        if will_close:
            self.close()
        return response

    def _connect(self) -> Connection:
        """The kept-alive connection if the server has not closed it meanwhile, else a new one."""
        if self._connection is not None and not _hung_up(self._connection):
            return self._connection
        self.close()
        self._connection = Connection(self.host, self.port, self.secure, self.timeout)
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


class Connection:
    """One connection to the server (TLS for https): requests written, answers read."""

    def __init__(self, host: str, port: int, secure: bool, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if secure:
                self.sock = _tls(self.sock, host)
            self.reader = self.sock.makefile("rb")
        except BaseException:
            self.sock.close()
            raise
        name = host if host.isascii() else host.encode("idna").decode("ascii")
        name = f"[{name}]" if ":" in name else name
        self.host = name if port == (443 if secure else 80) else f"{name}:{port}"

    def send(
        self, method: str, target: str, body: bytes | Upload | None, headers: dict[str, str]
    ) -> None:
        """Write a request, as http.client writes it; a header that would break the request's
        lines is a ValueError (as there)."""
        if found := UNSAFE_TARGET.search(target):
            raise ProtocolError(
                f"URL can't contain control characters. {target!r} (found {found.group()!r})"
            )
        fields = {"Host": self.host, "Accept-Encoding": "identity"} | headers
        if body is None and method in WITH_BODY:
            fields["Content-Length"] = "0"
        elif isinstance(body, bytes):
            fields["Content-Length"] = str(len(body))
        head = [f"{method} {target} HTTP/1.1\r\n".encode("ascii")]
        for name, value in fields.items():
            encoded_name, encoded_value = name.encode("ascii"), value.encode("latin-1")
            if not LEGAL_NAME.fullmatch(encoded_name):
                raise ValueError(f"Invalid header name {encoded_name!r}")
            if ILLEGAL_VALUE.search(encoded_value):
                raise ValueError(f"Invalid header value {encoded_value!r}")
            head.append(encoded_name + b": " + encoded_value + b"\r\n")
        head.append(b"\r\n")
        if isinstance(body, Upload):
            self.sock.sendall(b"".join(head))
            body.file.seek(0)  # from its start, also when sent again on a new connection
            while block := body.file.read(BLOCK):
                self.sock.sendall(block)
        else:
            self.sock.sendall(b"".join(head) + (body or b""))

    def answer(self, method: str) -> tuple[Response, bool]:
        """Read the answer to the request sent, and whether the server closes after it."""
        version, status, reason = self._status()
        while status == 100:  # Continue: the answer follows
            self._headers()
            version, status, reason = self._status()
        fields = self._headers()
        chunked = fields.get("transfer-encoding", "").lower() == "chunked"
        connection = fields.get("connection", "").lower()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            will_close = "keep-alive" not in connection and not fields.get("keep-alive")
        elif version.startswith("HTTP/1."):
            will_close = "close" in connection
        else:
            raise ProtocolError(f"not HTTP/1.x: {version[:20]}")
        length = None if chunked else _length(fields.get("content-length"))
        if status in (204, 304) or 100 <= status < 200 or method == "HEAD":
            length, chunked = 0, False
        if length is None and not chunked:
            will_close = True
        if chunked:
            content = self._chunks()
        elif length is None:
            content = self.reader.read()
        else:
            content = self.reader.read(length)
            if len(content) < length:
                raise ProtocolError(f"the answer ended after {len(content)} of {length} bytes")
        return Response(status, reason, content), will_close

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def _line(self) -> bytes:
        line = self.reader.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise ProtocolError("a line of the answer is too long")
        return line

    def _status(self) -> tuple[str, int, str]:
        line = self._line()
        if not line:  # closed before any answer (as http.client's RemoteDisconnected)
            raise ConnectionResetError("the server closed the connection without an answer")
        version, _, rest = line.decode("iso-8859-1").strip().partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit():
            raise ProtocolError(f"not an HTTP status line: {line[:80]!r}")
        return version, int(code), reason.strip()

    def _headers(self) -> dict[str, str]:
        """The header fields up to the blank line, by lower-case name (the first of a name,
        as http.client reads them)."""
        fields: dict[str, str] = {}
        name = ""
        for _ in range(MAX_HEADERS + 1):
            line = self._line()
            if line in (b"\r\n", b"\n", b""):
                return fields
            text = line.decode("iso-8859-1")
            if text[:1] in (" ", "\t") and name in fields:  # a folded line goes on the last
                fields[name] += " " + text.strip()
                continue
            name, _, value = text.partition(":")
            name = name.strip().lower()
            fields.setdefault(name, value.strip())
        raise ProtocolError(f"more than {MAX_HEADERS} header lines")

    def _chunks(self) -> bytes:
        """A chunked body, its trailer fields skipped."""
        parts = []
        while True:
            size = self._line().split(b";", 1)[0].strip()
            try:
                count = int(size, 16)
            except ValueError:
                raise ProtocolError(f"not a chunk size: {size[:20]!r}") from None
            if count == 0:
                self._headers()
                return b"".join(parts)
            part = self.reader.read(count)
            if len(part) < count or len(self.reader.read(2)) < 2:  # the chunk and its CRLF
                raise ProtocolError("a chunk of the answer was cut short")
            parts.append(part)


def _tls(sock: socket.socket, host: str) -> socket.socket:
    """``sock`` in TLS to ``host``, checked as http.client's HTTPSConnection checks it."""
    import ssl  # here: a plain http:// URL does without ssl's import

    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    if context.post_handshake_auth is not None:
        context.post_handshake_auth = True
    return context.wrap_socket(sock, server_hostname=host)


def _length(value: str | None) -> int | None:
    """A Content-Length, None when absent or not a length."""
    try:
        length = int(value) if value is not None else None
    except ValueError:
        return None
    return None if length is None or length < 0 else length


def _hung_up(connection: Connection) -> bool:
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
    if isinstance(error, (ConnectionError, ProtocolError)):
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
