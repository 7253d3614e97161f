"""The platform's proxy to workloads that listen on a port (notebooks, deployment replicas).

One ``Proxy`` per app (made in its lifespan, on ``app.state.proxy``, closed at shutdown),
holding pools of kept-alive HTTP connections: httpx's, for notebooks (bodies streamed both
ways), and ``proxy._upstream``'s, for /serve (a model's small bodies whole: far cheaper). It
forwards HTTP requests, and WebSockets frame by frame, to a target URL its caller chose;
what it passes on is decided by ``proxy._forwarding`` (a workload's cookies, for one, confined to
the path it is reached under, ``route_prefix``, or dropped where its caller says so). It
decides nothing about who may call: the routers of /notebooks and /serve let a caller in
(``api.proxied``) before they call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx
from fastapi import Request, WebSocket
from fastapi.responses import JSONResponse, Response, StreamingResponse
from httpcore._backends.anyio import AnyIOStream
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, HTTPConnection
from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Origin, Subprotocol

from gpupool.cluster.relay import connect_async
from gpupool.domain.endpoints import RelayTarget, Via
from gpupool.errors import (
    GpupoolError,
    PayloadTooLarge,
    UpstreamRefused,
    UpstreamTimeout,
    UpstreamUnavailable,
    error_body,
)
from gpupool.proxy._clients import PLAIN_HTTP
from gpupool.proxy._forwarding import (
    NO_COOKIES,
    Caller,
    CookieRule,
    confined_path,
    cookies_over_limit,
    request_headers,
    response_headers,
)
from gpupool.proxy._upstream import Answer, Broken, Refused, TimedOut, UpstreamLimits, Upstreams
from gpupool.runner import bridge

log = logging.getLogger(__name__)

# the methods the proxied routes take (every one a workload may serve)
MAX_SOCKET_TRANSPORTS = 256  # workloads with a network of their own, reached at once
PROXIED_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# close codes that are never sent in a close frame (RFC 6455 7.4.1), and what is sent instead
UNSENDABLE_CLOSE = {1005: 1000, 1006: 1011, 1015: 1011}


@dataclass(frozen=True)
class ProxyLimits:
    """How long the proxy waits on a workload (seconds), and how much it keeps open.

    ``read_seconds``: the longest silence while an answer comes (a slow model or a long
    poll), after which the client gets a 504 (or, once the answer has begun, a cut one).
    """

    connect_seconds: float = 10.0
    read_seconds: float = 300.0
    write_seconds: float = 60.0
    pool_seconds: float = 30.0
    max_connections: int = 1024
    max_keepalive: int = 256
    max_message_bytes: int = 64 * 1024**2  # one WebSocket message from a workload
    # a request's body, streamed (never held whole): a notebook saved, a file uploaded, a
    # model's input. The app's own 1 MiB limit leaves the proxied prefixes to this one.
    max_body_bytes: int = 512 * 1024**2
    # a request's body up to this size is read whole and sent in one piece; with ``whole``
    # (/serve), an answer that says it is no larger is passed on whole: a plain response
    # costs the proxy far less than a stream (a model's input and output are small)
    whole_request_bytes: int = 1024**2
    whole_answer_bytes: int = 1024**2


class Proxy:
    """Forwards requests and WebSockets to workloads; see the module's docstring."""

    def __init__(self, limits: ProxyLimits = ProxyLimits()) -> None:
        self.limits = limits
        # the transport alone, not a client around it: the proxy needs none of a client's
        # redirects, cookies or auth, and they cost it a tenth of a small request's time
        self.transport = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive,
            ),
            trust_env=False,  # never through an HTTP(S)_PROXY of the server's environment
            verify=PLAIN_HTTP,
        )
        timeouts = httpx.Timeout(
            connect=limits.connect_seconds,
            read=limits.read_seconds,
            write=limits.write_seconds,
            pool=limits.pool_seconds,
        )
        self.extensions = {"timeout": timeouts.as_dict()}  # each request's, made once
        self.upstreams = Upstreams(
            UpstreamLimits(
                connect_seconds=limits.connect_seconds,
                read_seconds=limits.read_seconds,
                write_seconds=limits.write_seconds,
                idle_per_replica=limits.max_keepalive,
            )
        )
        self.sockets = SocketTransports(limits)

    async def aclose(self) -> None:
        await self.transport.aclose()
        await self.upstreams.aclose()
        await self.sockets.aclose()

    # -- HTTP ---------------------------------------------------------------------------------

    async def http(
        self,
        request: Request,
        target: str,
        headers: Mapping[str, str] | None = None,
        *,
        raise_refused: bool = False,
        whole: bool = False,
        keep_cookies: bool = True,
        via: Via = None,
    ) -> Response:
        """Forward ``request`` to ``target`` (``http://host:port`` and the path and query);
        the workload's answer back with its status and headers. A request's body travels
        whole when it says it is small (``ProxyLimits``), streamed otherwise. A workload
        that cannot be reached: 502 upstream_unavailable (a ``ProxyAnswer``); too slow: 504.
        ``raise_refused``: raise UpstreamRefused when the workload refused the connection
        (nothing of the request was sent), so that the caller may send it elsewhere.
        ``whole`` (/serve): through ``proxy._upstream``, the request's body read whole, and an
        answer that says it is small passed on whole, as a plain Response (without it,
        every answer is a StreamingResponse, for a caller that reads or rewrites it).
        ``keep_cookies``: pass on the workload's cookies, confined to the path it is reached
        under (``route_prefix``); False: drop them all. ``via``: the runner's socket of a
        workload with a network of its own, the only way to it (``runner.bridge``), or its
        node agent's relay to that socket (``cluster.relay``)."""
        cookies = cookie_rule(request, keep_cookies)
        if whole:
            return await self._whole(request, target, headers, raise_refused, cookies, via)
        transport = self.transport if via is None else await self.sockets.get(via)
        upstream = _origin(target)
        sent = request_headers(request.headers.items(), caller_of(request), upstream, headers)
        try:
            content = await _body(request, self.limits)
            outgoing = httpx.Request(
                request.method, target, headers=sent, content=content, extensions=self.extensions
            )
            answer = await transport.handle_async_request(outgoing)
        except _BodyTooLarge:
            return _failed(_too_large(self.limits.max_body_bytes), target, None)
        except ClientDisconnect:  # nobody is left to answer
            return Response(status_code=400)
        except httpx.TimeoutException as error:
            return _failed(UpstreamTimeout(), target, error)
        except httpx.ConnectError as error:
            if raise_refused:
                raise _logged(UpstreamRefused(), target, error) from error
            return _failed(UpstreamUnavailable(), target, error)
        except httpx.HTTPError as error:
            return _failed(UpstreamUnavailable(), target, error)
        return _streamed(answer, target, upstream, cookies)

    async def _whole(
        self,
        request: Request,
        target: str,
        headers: Mapping[str, str] | None,
        raise_refused: bool,
        cookies: CookieRule,
        via: Via = None,
    ) -> Response:
        """``http`` for /serve, through ``proxy._upstream``: the request's body whole, and the
        answer too when it says it is small."""
        upstream = _origin(target)
        parts = urlsplit(upstream)
        address = (parts.hostname or "", parts.port or 80)
        sent = request_headers(request.headers.items(), caller_of(request), upstream, headers)
        try:
            body = await _whole_body(request, self.limits.max_body_bytes)
            answer = await self.upstreams.request(
                request.method,
                address,
                target[len(upstream) :] or "/",
                sent,
                body,
                self.limits.whole_answer_bytes,
                via,
            )
        except _BodyTooLarge:
            return _failed(_too_large(self.limits.max_body_bytes), target, None)
        except ClientDisconnect:
            return Response(status_code=400)
        except TimedOut as error:
            return _failed(UpstreamTimeout(), target, error)
        except Refused as error:
            if raise_refused:
                raise _logged(UpstreamRefused(), target, error) from error
            return _failed(UpstreamUnavailable(), target, error)
        except Broken as error:
            return _failed(UpstreamUnavailable(), target, error)
        return _passed_on(answer, target, upstream, cookies)

    # -- WebSockets ---------------------------------------------------------------------------

    async def websocket(
        self,
        websocket: WebSocket,
        target: str,
        headers: Mapping[str, str] | None = None,
        subprotocols: Sequence[str] | None = None,
        via: Via = None,
    ) -> None:
        """Connect to ``target`` (``ws://host:port/path?query``), then accept the client
        with the subprotocol the workload chose, and pass text and binary messages both ways
        until one side closes, its close code passed to the other. ``subprotocols``: what
        to offer the workload (default: what the client offered). A workload that cannot be
        reached refuses the client's handshake (502 or 504 where the server can say so), as
        does one that answers the handshake with anything but a switch to WebSocket (502: a
        browser's script is told no more than that its WebSocket failed)."""
        try:
            upstream = await self._connect(websocket, target, headers, subprotocols, via)
        except GpupoolError as error:
            await refuse_websocket(websocket, error)
            return
        async with upstream:
            await websocket.accept(subprotocol=upstream.subprotocol)
            await _pump(websocket, upstream)

    async def _connect(
        self,
        websocket: WebSocket,
        target: str,
        headers: Mapping[str, str] | None,
        subprotocols: Sequence[str] | None,
        via: Via = None,
    ) -> ClientConnection:
        upstream = _origin(target)
        caller = caller_of(websocket)
        sent = request_headers(websocket.headers.items(), caller, upstream, headers, websocket=True)
        offered = list(
            subprotocols if subprotocols is not None else websocket.scope.get("subprotocols", ())
        )
        origin = Origin(upstream) if "origin" in websocket.headers else None
        options = {
            "additional_headers": sent,
            "subprotocols": [Subprotocol(p) for p in offered] or None,
            "origin": origin,
            "proxy": None,  # never through a proxy of the server's environment
            "compression": None,  # a hop on the node's network: not worth the CPU
            "open_timeout": self.limits.connect_seconds,
            "max_size": self.limits.max_message_bytes,
            "user_agent_header": None,
        }
        try:
            if via is None:
                return await connect(target, **options)
            if isinstance(via, RelayTarget):  # through its node agent's relay
                async with asyncio.timeout(self.limits.connect_seconds):
                    sock = await connect_async(via)
                return await connect(target, sock=sock, **options)
            with bridge.unix_address(via) as address:  # relayed by the runner's bridge
                return await unix_connect(address, target, **options)
        except TimeoutError as error:
            raise _logged(UpstreamTimeout(), target, error) from error
        except InvalidStatus as error:
            raise _logged(_refused(error), target, error) from error
        except (OSError, InvalidHandshake) as error:
            raise _logged(UpstreamUnavailable(), target, error) from error


def proxy_of(connection: HTTPConnection) -> Proxy:
    """The app's proxy (made by its lifespan)."""
    return connection.app.state.proxy


def cookie_rule(connection: HTTPConnection, keep: bool) -> CookieRule:
    """What becomes of a workload's cookies: confined to ``route_prefix`` when ``keep``,
    else (or where the route has no ``path`` parameter to tell the prefix) dropped."""
    prefix = route_prefix(connection) if keep else None  # /serve's requests: no work
    return NO_COOKIES if prefix is None else CookieRule(path=confined_path(prefix))


def route_prefix(connection: HTTPConnection) -> str | None:
    """The path a workload is reached under: the request's path less the route's ``path``
    parameter (``/notebooks/7/`` of ``/notebooks/7/lab``); None without that parameter."""
    rest = connection.path_params.get("path")
    if not isinstance(rest, str):
        return None
    path = connection.scope["path"]
    return path[: len(path) - len(rest)] if path.endswith(rest) else None


def caller_of(connection: HTTPConnection) -> Caller:
    """Who asked, as this server saw the connection (no header the client wrote)."""
    scheme = connection.scope.get("scheme", "http")  # the URL's, without building it
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    address = connection.client.host if connection.client else "unknown"
    return Caller(address=address, scheme=scheme, host=connection.headers.get("host", ""))


async def refuse_websocket(websocket: WebSocket, error: GpupoolError) -> None:
    """Refuse a WebSocket before accepting it: its HTTP status and JSON error where the
    server can send a response to a handshake, else a close (the client sees a 403)."""
    body = error_body(error.code, error.message, error.details)
    await _deny(websocket, JSONResponse(body, status_code=error.status))


async def _deny(websocket: WebSocket, response: Response) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=1008)


def _refused(error: InvalidStatus) -> UpstreamUnavailable:
    """A workload that answered a WebSocket's handshake with a plain HTTP answer: the
    proxy's 502 (its body and headers are not passed on: neither its cookies nor a page)."""
    status = error.response.status_code
    return UpstreamUnavailable(
        f"the workload answered the WebSocket's handshake with HTTP {status}, not a switch "
        "to WebSocket: check the path, and that the workload serves WebSockets there",
        status=status,
    )


class ProxyAnswer(JSONResponse):
    """An answer the proxy made itself (the workload was not reached, or too slow), told
    apart from a workload's own answer of the same status."""


class _BodyTooLarge(Exception):
    """The request's body is over the proxy's limit."""


async def _body(request: Request, limits: ProxyLimits) -> bytes | AsyncIterator[bytes] | None:
    """The request's body: whole when it says it is small, else a stream held to the limit
    (_BodyTooLarge); None when it has none (a GET is sent without)."""
    declared = request.headers.get("content-length")
    if declared is None and "transfer-encoding" not in request.headers:
        return None
    if declared == "0":
        return None
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > limits.max_body_bytes:
        raise _BodyTooLarge()
    if size is not None and size <= limits.whole_request_bytes:
        return await request.body()  # the server holds a body to its Content-Length
    return _limited(request.stream(), limits.max_body_bytes)


async def _whole_body(request: Request, limit: int) -> bytes:
    """The request's body, read whole and held to ``limit`` bytes (_BodyTooLarge)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge()
    return b"".join([chunk async for chunk in _limited(request.stream(), limit)])


async def _limited(stream: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise _BodyTooLarge()
        yield chunk


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"the request body is larger than the {limit} bytes the proxy takes")


def _passed_on(answer: Answer, target: str, upstream: str, cookies: CookieRule) -> Response:
    """A replica's answer for the client: whole, or streamed as it comes."""
    if answer.body is not None:
        response = Response(status_code=answer.status)
        response.body = answer.body  # with the replica's own Content-Length, as it was sent
    else:
        assert answer.chunks is not None
        response = StreamingResponse(
            _relay_chunks(answer.chunks, target),
            status_code=answer.status,
            background=BackgroundTask(answer.aclose),
        )
    response.raw_headers = _raw(_headers_back(answer.headers, target, upstream, cookies))
    return response


async def _relay_chunks(chunks: AsyncIterator[bytes], target: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    except (Broken, TimedOut) as error:  # headers are sent: the client sees a cut answer
        log.info("the answer of %s was cut: %s", target, error)
        raise
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]  # its connection, closed or kept


def _streamed(
    answer: httpx.Response, target: str, upstream: str, cookies: CookieRule
) -> StreamingResponse:
    """The workload's answer passed on as it comes."""
    response = StreamingResponse(
        _relay(answer, target),
        status_code=answer.status_code,
        background=BackgroundTask(answer.aclose),
    )
    # as sent, byte for byte: httpx's own decoding (UTF-8 where it can) would not encode back
    received = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in answer.headers.raw]
    response.raw_headers = _raw(_headers_back(received, target, upstream, cookies))
    return response


def _headers_back(
    headers: list[tuple[str, str]], target: str, upstream: str, cookies: CookieRule
) -> list[tuple[str, str]]:
    """``forwarding.response_headers``; the cookies dropped past the limit said in the log
    (a workload trying to fill its users' cookie jars)."""
    over = cookies_over_limit(headers, cookies)
    if over:
        log.warning(
            "proxy to %s: %d Set-Cookie headers over the %d an answer may carry were dropped",
            target,
            over,
            cookies.limit,
        )
    return response_headers(headers, upstream, cookies)


async def _relay(answer: httpx.Response, target: str) -> AsyncIterator[bytes]:
    """The workload's body as it comes, undecoded (its Content-Encoding is passed on)."""
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    except httpx.HTTPError as error:  # headers are sent: the client sees a cut answer
        log.info("the answer of %s was cut: %s", target, error)
        raise
    finally:
        await answer.aclose()


async def _pump(websocket: WebSocket, upstream: ClientConnection) -> None:
    """Messages both ways until one side closes; then the other side is closed too."""
    tasks = [
        asyncio.create_task(_to_upstream(websocket, upstream)),
        asyncio.create_task(_to_client(upstream, websocket)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _to_upstream(websocket: WebSocket, upstream: ClientConnection) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            code = _sendable(message.get("code") or 1000)
            await upstream.close(code, message.get("reason") or "")
            return
        data = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        try:
            await upstream.send(data)
        except ConnectionClosed:
            return


async def _to_client(upstream: ClientConnection, websocket: WebSocket) -> None:
    try:
        async for data in upstream:
            if isinstance(data, str):
                await websocket.send_text(data)
            else:
                await websocket.send_bytes(data)
    except ConnectionClosed:
        pass
    code = _sendable(upstream.close_code or 1000)
    with contextlib.suppress(RuntimeError, OSError):  # the client may have gone already
        await websocket.close(code, upstream.close_reason or None)


def _sendable(code: int) -> int:
    return UNSENDABLE_CLOSE.get(code, code)


def _origin(target: str) -> str:
    """``http://host:port`` of a target URL (``ws://`` is reached as ``http://``)."""
    parts = urlsplit(target)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return f"{scheme}://{parts.netloc}"


def _raw(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


def _failed(error: GpupoolError, target: str, cause: Exception | None) -> ProxyAnswer:
    _logged(error, target, cause)
    return ProxyAnswer(error_body(error.code, error.message), status_code=error.status)


def _logged(error: GpupoolError, target: str, cause: Exception | None) -> GpupoolError:
    log.info("proxy to %s: %s (%s)", target, error.code, cause)
    return error


class SocketTransports:
    """httpx transports to workloads with a network of their own, one per runner's socket
    or node agent's relay to it (each keeps its connections alive), owned by the proxy;
    past ``MAX_SOCKET_TRANSPORTS`` the least recently used is closed (a notebook long gone)."""

    def __init__(self, limits: ProxyLimits) -> None:
        self.limits = limits
        self._open: OrderedDict[
            str | RelayTarget, tuple[httpx.AsyncHTTPTransport, AbstractContextManager]
        ] = OrderedDict()

    async def get(self, path: str | RelayTarget) -> httpx.AsyncHTTPTransport:
        if path in self._open:
            self._open.move_to_end(path)
            return self._open[path][0]
        if isinstance(path, RelayTarget):
            transport: httpx.AsyncHTTPTransport = _RelayTransport(path)
            address: AbstractContextManager = contextlib.nullcontext()
        else:
            address = bridge.unix_address(path)  # held open as long as the transport
            transport = httpx.AsyncHTTPTransport(
                uds=address.__enter__(),
                limits=httpx.Limits(max_keepalive_connections=32),
                trust_env=False,
                verify=PLAIN_HTTP,  # one made once (_clients): a transport per workload
            )
        self._open[path] = (transport, address)
        while len(self._open) > MAX_SOCKET_TRANSPORTS:
            await self._close(*self._open.popitem(last=False)[1])
        return transport

    async def aclose(self) -> None:
        opened, self._open = self._open, OrderedDict()
        for transport, address in opened.values():
            await self._close(transport, address)

    @staticmethod
    async def _close(transport: httpx.AsyncHTTPTransport, address: AbstractContextManager) -> None:
        try:
            await transport.aclose()
        finally:
            address.__exit__(None, None, None)


class _RelayTransport(httpx.AsyncHTTPTransport):
    """httpx through a node agent's relay: each new connection is one the relay handed to
    the workload (``cluster.relay``); kept alive as any other."""

    def __init__(self, target: RelayTarget) -> None:
        super().__init__(trust_env=False, verify=PLAIN_HTTP)
        self._pool = httpcore.AsyncConnectionPool(
            max_keepalive_connections=32, network_backend=_RelayBackend(target)
        )


class _RelayBackend(httpcore.AnyIOBackend):
    def __init__(self, target: RelayTarget) -> None:
        self.target = target

    async def connect_tcp(  # type: ignore[override]  # the target is the backend's own
        self, host: str, port: int, timeout: float | None = None, **_: object
    ) -> AnyIOStream:
        try:
            with anyio.fail_after(timeout):
                sock = await connect_async(self.target)
        except TimeoutError as error:
            raise httpcore.ConnectTimeout(str(error)) from error
        except OSError as error:
            raise httpcore.ConnectError(str(error)) from error
        return AnyIOStream(await anyio.abc.SocketStream.from_socket(sock))
