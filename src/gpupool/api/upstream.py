"""A small HTTP/1.1 client of the proxy's own, for /serve's requests to deployment replicas:
kept-alive connections over asyncio streams, a request's body sent whole, an answer read whole
when it says it is small, else streamed (by its Content-Length, chunked, or until the replica
closes).

Why not httpx, which the proxy uses for notebooks: for a model's small request and answer it
cost the server ~0.6 ms more per request than this client (a bare proxy on this machine, p50:
+0.9 ms over the replica called directly, against +0.3 ms with this one), and /serve's aim is
to add little to a model that answers in a millisecond (benchmarks/proxy_overhead.py).

What it refuses to pass on (``Broken``): an answer that is not HTTP/1.x, a head over
``max_head_bytes``, a folded header line, Content-Lengths that disagree, a bad chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

Headers = list[tuple[str, str]]

NO_BODY_STATUSES = frozenset({204, 304})
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# what a request's target may hold: no space, no control character (the client's, as sent)
TARGET = re.compile(r"/[^\x00-\x20\x7f]*")
HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
UNSENDABLE = re.compile(r"[\r\n\x00]")
READ_SIZE = 64 * 1024


class Refused(Exception):
    """The replica refused the connection: nothing of the request was sent."""


class TimedOut(Exception):
    """The replica was too slow to take the connection, the request or to answer."""


class Broken(Exception):
    """The connection broke, or the replica's answer is not one this client passes on."""


@dataclass(frozen=True)
class UpstreamLimits:
    """How long this client waits (seconds), and how much it keeps."""

    connect_seconds: float = 10.0
    read_seconds: float = 300.0  # the longest silence while an answer comes
    write_seconds: float = 60.0
    idle_per_replica: int = 64  # kept-alive connections kept open to one replica
    max_head_bytes: int = 64 * 1024  # an answer's status line and headers


@dataclass
class Answer:
    """A replica's answer: its ``body`` when read whole, else ``chunks`` (to be read to the
    end or closed with ``aclose``)."""

    status: int
    headers: Headers
    body: bytes | None = None
    chunks: AsyncIterator[bytes] | None = None

    async def aclose(self) -> None:
        if self.chunks is not None:
            await self.chunks.aclose()  # type: ignore[attr-defined]  # an async generator


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def usable(self) -> bool:
        """Still open (a replica that closed an idle connection has sent its end of file,
        seen as soon as the event loop read it)."""
        return not (self.writer.is_closing() or self.reader.at_eof())

    def close(self) -> None:
        self.writer.close()


class Upstreams:
    """Kept-alive connections to replicas, by (host, port); one per app, closed with it."""

    def __init__(self, limits: UpstreamLimits = UpstreamLimits()) -> None:
        self.limits = limits
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def request(
        self,
        method: str,
        address: tuple[str, int],
        target: str,
        headers: Headers,
        body: bytes,
        whole_bytes: int,
    ) -> Answer:
        """Send the request; its answer, read whole when it says it is at most
        ``whole_bytes`` long. Refused, TimedOut or Broken when no answer came."""
        if not TARGET.fullmatch(target):
            raise Broken(f"not a request target: {target!r}")
        connection = self._idle_one(address) or await self._connect(address)
        try:
            await self._send(connection, _request(method, address, target, headers, body))
            return await self._answer(connection, address, method, whole_bytes)
        except BaseException:
            connection.close()
            raise

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    # -- connections --------------------------------------------------------------------------

    def _idle_one(self, address: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(address, [])
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
            connection.close()
        self._idle.pop(address, None)  # no key left behind for a replica gone for good
        return None

    async def _connect(self, address: tuple[str, int]) -> _Connection:
        try:
            async with asyncio.timeout(self.limits.connect_seconds):
                reader, writer = await asyncio.open_connection(*address, limit=READ_SIZE)
        except TimeoutError as error:
            raise TimedOut(f"no connection to {address} in time") from error
        except ConnectionRefusedError as error:
            raise Refused(str(error)) from error
        except OSError as error:
            raise Broken(str(error)) from error
        with contextlib.suppress(OSError):  # an answer's small writes go out at once
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    def _release(self, address: tuple[str, int], connection: _Connection, keep: bool) -> None:
        idle = self._idle.setdefault(address, [])
        if keep and connection.usable() and len(idle) < self.limits.idle_per_replica:
            idle.append(connection)
        else:
            connection.close()

    # -- one exchange -------------------------------------------------------------------------

    async def _send(self, connection: _Connection, data: bytes) -> None:
        try:
            connection.writer.write(data)
            async with asyncio.timeout(self.limits.write_seconds):
                await connection.writer.drain()
        except TimeoutError as error:
            raise TimedOut("the replica did not take the request in time") from error
        except OSError as error:
            raise Broken(str(error)) from error

    async def _answer(
        self, connection: _Connection, address: tuple[str, int], method: str, whole_bytes: int
    ) -> Answer:
        status, headers, keep = await self._head(connection)
        while 100 <= status < 200:  # an interim answer (103 Early Hints): the final one follows
            if status == 101:
                raise Broken("the replica switched protocols unasked")
            status, headers, keep = await self._head(connection)
        framing, size = _framing(method, status, headers)
        if framing == "none":
            self._release(address, connection, keep)
            return Answer(status, headers, body=b"")
        if framing == "length" and size <= whole_bytes:
            body = await self._read(connection.reader.readexactly(size))
            self._release(address, connection, keep)
            return Answer(status, headers, body=body)
        chunks = self._chunks(connection, address, framing, size, keep)
        return Answer(status, headers, chunks=chunks)

    async def _head(self, connection: _Connection) -> tuple[int, Headers, bool]:
        """The status, headers and whether the connection may be kept after this answer."""
        lines: list[bytes] = []
        seen = 0
        while True:
            line = await self._read(connection.reader.readuntil(b"\r\n"))
            seen += len(line)
            if seen > self.limits.max_head_bytes:
                raise Broken("the answer's head is too large")
            if line == b"\r\n":
                break
            lines.append(line[:-2])
        if not lines:
            raise Broken("an empty answer")
        return _parsed_head(lines)

    async def _chunks(
        self,
        connection: _Connection,
        address: tuple[str, int],
        framing: str,
        size: int,
        keep: bool,
    ) -> AsyncIterator[bytes]:
        """The body as it comes; the connection kept once it was read to its end."""
        done = False
        try:
            if framing == "length":
                async for chunk in self._sized(connection.reader, size):
                    yield chunk
            elif framing == "chunked":
                async for chunk in self._dechunked(connection.reader):
                    yield chunk
            else:
                while chunk := await self._read(connection.reader.read(READ_SIZE)):
                    yield chunk
                keep = False
            done = True
        finally:
            if done:
                self._release(address, connection, keep)
            else:
                connection.close()

    async def _sized(self, reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
        left = size
        while left:
            chunk = await self._read(reader.read(min(left, READ_SIZE)))
            if not chunk:
                raise Broken("the replica closed the connection before the end of its answer")
            left -= len(chunk)
            yield chunk

    async def _dechunked(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while size := _chunk_size(await self._read(reader.readuntil(b"\r\n"))):
            async for part in self._sized(reader, size):
                yield part
            if await self._read(reader.readexactly(2)) != b"\r\n":
                raise Broken("a chunk does not end where it said")
        while await self._read(reader.readuntil(b"\r\n")) != b"\r\n":
            pass  # trailers: not passed on

    async def _read(self, reading):  # noqa: ANN001, ANN202 - a StreamReader's awaitable
        """Await a read of the answer, within the read timeout."""
        try:
            async with asyncio.timeout(self.limits.read_seconds):
                return await reading
        except TimeoutError as error:
            raise TimedOut("the replica was silent too long") from error
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as error:
            raise Broken(f"the answer was cut or too long: {error!r}") from error


def _request(
    method: str, address: tuple[str, int], target: str, headers: Headers, body: bytes
) -> bytes:
    """The request's bytes: its own Host (the replica's address) and Content-Length."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {address[0]}:{address[1]}"]
    for name, value in headers:
        if not TOKEN.fullmatch(name) or UNSENDABLE.search(value):
            raise Broken(f"a header that cannot be sent: {name!r}")
        if name.lower() != "content-length":
            lines.append(f"{name}: {value}")
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _parsed_head(lines: list[bytes]) -> tuple[int, Headers, bool]:
    status_line = lines[0].decode("latin-1")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or not (code.isdigit() and len(code) == 3):
        raise Broken(f"not an HTTP/1.x answer: {status_line[:80]!r}")
    headers: Headers = []
    for raw in lines[1:]:
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon or not TOKEN.fullmatch(name):  # a folded or malformed line
            raise Broken(f"a malformed header line: {raw[:80]!r}")
        headers.append((name, value.strip(" \t")))
    closes = any(
        name.lower() == "connection" and "close" in value.lower() for name, value in headers
    )
    return int(code), headers, version == "HTTP/1.1" and not closes


def _framing(method: str, status: int, headers: Headers) -> tuple[str, int]:
    """How the answer's body ends: ``none``, ``length`` (and its size), ``chunked`` or
    ``close`` (RFC 9112 6.3)."""
    if method == "HEAD" or status in NO_BODY_STATUSES:
        return "none", 0
    codings = [v for n, v in headers if n.lower() == "transfer-encoding"]
    if codings:
        last = ",".join(codings).split(",")[-1].strip().lower()
        return ("chunked", 0) if last == "chunked" else ("close", 0)
    lengths = {v.strip() for n, v in headers if n.lower() == "content-length"}
    if not lengths:
        return "close", 0
    if len(lengths) > 1 or not next(iter(lengths)).isdigit():
        raise Broken(f"Content-Lengths that disagree, or are not numbers: {sorted(lengths)}")
    size = int(lengths.pop())
    return ("length", size) if size else ("none", 0)


def _chunk_size(line: bytes) -> int:
    text = line[:-2].split(b";", 1)[0].strip()
    if not HEX.fullmatch(text):
        raise Broken(f"a bad chunk size: {line[:40]!r}")
    return int(text, 16)
