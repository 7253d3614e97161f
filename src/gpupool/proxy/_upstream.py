"""A small HTTP/1.1 client of the proxy's own, for /serve's requests to deployment replicas:
kept-alive connections over asyncio streams, a request's body sent whole, an answer read whole
when it says it is small, else streamed (by its Content-Length, chunked, or until the replica
closes). The protocol itself (framing, parsing, keep-alive) is h11's; this module moves its
bytes and keeps the connections.

Why not httpx, which the proxy uses for notebooks: for a model's small request and answer it
cost the server ~0.6 ms more per request than this client (a bare proxy on this machine, p50:
+0.9 ms over the replica called directly, against +0.3 ms with this one), and /serve's aim is
to add little to a model that answers in a millisecond (benchmarks/proxy_overhead.py). On h11
it still holds: a small request's round trip to a bare local replica, p50 0.19 ms, against
0.50 ms through httpx's transport (which runs h11 too, under more layers).

What it refuses to pass on (``Broken``): whatever h11 will not read as an HTTP/1.x answer
(a head over ``max_head_bytes``, Content-Lengths that disagree, a bad chunk, ...), and a
switch of protocols it did not ask for.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TypeVar

import h11

from gpupool.cluster.relay import connect_async
from gpupool.domain.endpoints import RelayTarget, Via
from gpupool.runner import bridge

Headers = list[tuple[str, str]]
Key = tuple[str, int] | str | RelayTarget  # a replica's kept-alive connections: how reached

NO_BODY_STATUSES = frozenset({204, 304})
# not sent as the caller gave them: the replica's own Host, and the body's own length
OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding"})
VERSIONS = frozenset({b"1.0", b"1.1"})
READ_SIZE = 64 * 1024
T = TypeVar("T")


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
    """One kept-alive connection: its streams and h11's state of the exchange on it."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_head_bytes: int
    ) -> None:
        self.reader, self.writer = reader, writer
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_head_bytes)
        self.received = 0  # bytes read from the replica, all answers together

    def usable(self) -> bool:
        """Ready for a request and still open (a replica that closed an idle connection has
        sent its end of file, seen as soon as the event loop read it)."""
        closed = self.writer.is_closing() or self.reader.at_eof()
        return self.http.our_state is h11.IDLE and not closed

    def reusable(self) -> bool:
        """The exchange ended cleanly and both sides may go on: h11 has moved to the next."""
        http = self.http
        if http.our_state is not h11.DONE or http.their_state is not h11.DONE:
            return False  # a Connection: close, an HTTP/1.0 answer, one cut or read to close
        if http.trailing_data != (b"", False):
            return False  # bytes after the answer that nobody asked for
        http.start_next_cycle()
        return True

    def close(self) -> None:
        self.writer.close()


class Upstreams:
    """Kept-alive connections to replicas, by (host, port), or by the way to a replica with
    a network of its own (its runner's socket, its node agent's relay); one per app, closed
    with it."""

    def __init__(self, limits: UpstreamLimits = UpstreamLimits()) -> None:
        self.limits = limits
        self._idle: dict[Key, list[_Connection]] = {}

    async def request(
        self,
        method: str,
        address: tuple[str, int],
        target: str,
        headers: Headers,
        body: bytes,
        whole_bytes: int,
        via: Via = None,
    ) -> Answer:
        """Send the request; its answer, read whole when it says it is at most
        ``whole_bytes`` long. Refused, TimedOut or Broken when no answer came. ``via``: the
        runner's socket that hands over a connection to the replica's ``address`` inside
        its own network namespace (``runner.bridge``), or its node agent's relay to that
        socket (``cluster.relay``: a connection per new kept-alive one)."""
        head = _request(method, address, target, headers, body)  # checked before any sending
        key = via or address
        connection = self._idle_one(key) or await self._connect(address, via)
        try:
            await self._send(connection, head, body)
            return await self._answer(connection, key, method, whole_bytes)
        except BaseException:
            connection.close()
            raise

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    # -- connections --------------------------------------------------------------------------

    def _idle_one(self, address: Key) -> _Connection | None:
        idle = self._idle.get(address, [])
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
            connection.close()
        self._idle.pop(address, None)  # no key left behind for a replica gone for good
        return None

    async def _connect(self, address: tuple[str, int], via: Via) -> _Connection:
        try:
            async with asyncio.timeout(self.limits.connect_seconds):
                if via is None:
                    reader, writer = await asyncio.open_connection(*address, limit=READ_SIZE)
                else:
                    relayed = isinstance(via, RelayTarget)
                    sock = await (connect_async(via) if relayed else _handed_over(via))
                    reader, writer = await asyncio.open_connection(sock=sock, limit=READ_SIZE)
        except TimeoutError as error:
            raise TimedOut(f"no connection to {address} in time") from error
        except (ConnectionRefusedError, FileNotFoundError) as error:  # no socket: not yet
            raise Refused(str(error)) from error
        except OSError as error:
            raise Broken(str(error)) from error
        with contextlib.suppress(OSError):  # an answer's small writes go out at once
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer, self.limits.max_head_bytes)

    def _release(self, address: Key, connection: _Connection) -> None:
        """Keep the connection of an answer read to its end, if h11 says it may be reused."""
        idle = self._idle.setdefault(address, [])
        if len(idle) < self.limits.idle_per_replica and connection.reusable():
            idle.append(connection)
        else:
            connection.close()

    # -- one exchange -------------------------------------------------------------------------

    async def _send(self, connection: _Connection, head: h11.Request, body: bytes) -> None:
        events = [head, h11.Data(data=body)] if body else [head]
        data = b"".join(connection.http.send(event) or b"" for event in events)
        data += connection.http.send(h11.EndOfMessage()) or b""
        try:
            connection.writer.write(data)
            async with asyncio.timeout(self.limits.write_seconds):
                await connection.writer.drain()
        except TimeoutError as error:
            raise TimedOut("the replica did not take the request in time") from error
        except OSError as error:
            raise Broken(str(error)) from error

    async def _answer(
        self,
        connection: _Connection,
        address: Key,
        method: str,
        whole_bytes: int,
    ) -> Answer:
        response = await self._response(connection)
        status = response.status_code
        headers = [
            (n.decode("latin-1"), v.decode("latin-1")) for n, v in response.headers.raw_items()
        ]
        size = _declared_size(method, response)
        if size is not None and size <= whole_bytes:
            body = b"".join([chunk async for chunk in self._body(connection)])
            self._release(address, connection)
            return Answer(status, headers, body=body)
        return Answer(status, headers, chunks=self._chunks(connection, address))

    async def _response(self, connection: _Connection) -> h11.Response:
        """The final answer's head, past any interim one (103 Early Hints). What is read until
        then is held to ``max_head_bytes`` (and one more: h11 then says the head is too
        large), however the reads fell."""
        limit = connection.received + self.limits.max_head_bytes + 1
        event = await self._event(connection, limit)
        while isinstance(event, h11.InformationalResponse):
            if event.status_code == 101:
                raise Broken("the replica switched protocols unasked")
            event = await self._event(connection, limit)
        if not isinstance(event, h11.Response) or event.http_version not in VERSIONS:
            raise Broken(f"not an HTTP/1.x answer: {event!r:.120}")
        return event

    async def _chunks(self, connection: _Connection, address: Key) -> AsyncIterator[bytes]:
        """The body as it comes; the connection kept once it was read to its end."""
        done = False
        try:
            async for chunk in self._body(connection):
                yield chunk
            done = True
        finally:
            if done:
                self._release(address, connection)
            else:
                connection.close()

    async def _body(self, connection: _Connection) -> AsyncIterator[bytes]:
        """The answer's body, to its end (trailers: not passed on)."""
        while isinstance(event := await self._event(connection), h11.Data):
            yield bytes(event.data)
        if not isinstance(event, h11.EndOfMessage):
            raise Broken(f"the answer's body ended with {event!r:.120}")

    async def _event(self, connection: _Connection, limit: int | None = None) -> object:
        """h11's next event of the answer, reading from the replica as long as it needs (up
        to ``limit`` bytes received on the connection, when given)."""
        http = connection.http
        while True:
            try:
                event = http.next_event()
            except h11.RemoteProtocolError as error:
                raise Broken(f"an answer that is not HTTP/1.x as it should be: {error}") from error
            if event is not h11.NEED_DATA:
                if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    raise Broken("the replica closed the connection before the end of its answer")
                return event
            size = READ_SIZE if limit is None else min(READ_SIZE, limit - connection.received)
            if size <= 0:
                raise Broken("the answer's head is too large")
            data = await self._read(connection.reader.read(size))
            connection.received += len(data)
            http.receive_data(data)

    async def _read(self, reading: Awaitable[T]) -> T:
        """Await a read of the answer, within the read timeout."""
        try:
            async with asyncio.timeout(self.limits.read_seconds):
                return await reading
        except TimeoutError as error:
            raise TimedOut("the replica was silent too long") from error
        except OSError as error:
            raise Broken(f"the answer was cut: {error!r}") from error


async def _handed_over(path: str) -> socket.socket:
    """A connection to a replica inside its own network namespace, handed over by its
    runner's bridge (``runner.bridge.handoff``, without blocking the event loop)."""
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        unix.setblocking(False)
        with bridge.unix_address(path) as address:
            await loop.sock_connect(unix, address)
        await loop.sock_sendall(unix, bridge.HANDOFF)
        readable = loop.create_future()
        loop.add_reader(unix.fileno(), lambda: readable.done() or readable.set_result(None))
        try:
            await readable
        finally:
            loop.remove_reader(unix.fileno())
        return bridge.received(*socket.recv_fds(unix, 64, 1)[:2], path)


def _request(
    method: str, address: tuple[str, int], target: str, headers: Headers, body: bytes
) -> h11.Request:
    """The request's head, checked by h11 (no CR, LF or NUL where they could split it): its
    own Host (the replica's address) and Content-Length."""
    if not target.startswith("/"):  # origin-form only: never a URL of another host
        raise Broken(f"not a request target: {target!r}")
    sent = [("Host", f"{address[0]}:{address[1]}")]
    sent += [(name, value) for name, value in headers if name.lower() not in OWN_HEADERS]
    if body or method in ("POST", "PUT", "PATCH"):
        sent.append(("Content-Length", str(len(body))))
    try:
        encoded = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in sent]
        return h11.Request(method=method, target=target.encode("latin-1"), headers=encoded)
    except (h11.LocalProtocolError, UnicodeEncodeError) as error:
        raise Broken(f"a request that cannot be sent as it is: {error}") from error


def _declared_size(method: str, response: h11.Response) -> int | None:
    """How long the answer's body says it is (RFC 9112 6.3); None when chunked or read until
    the replica closes. h11 has checked the Content-Length already."""
    if method == "HEAD" or response.status_code in NO_BODY_STATUSES:
        return 0
    lengths = [v for n, v in response.headers if n in (b"content-length", b"transfer-encoding")]
    if len(lengths) != 1 or not lengths[0].isdigit():  # chunked (it wins), or none
        return None
    return int(lengths[0])
