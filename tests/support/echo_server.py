"""A workload that listens (JobSpec.listen): it serves on $PORT at $GPUPOOL_LISTEN_HOST and says
what reached it, for the proxy's tests. Run as a job: ``python -c SOURCE`` (the job's sandbox
shows it no file of the repository), with uvicorn and a bare ASGI app.

HTTP: ``GET /stream`` sends a first line, then the rest once ``/release`` was asked; ``/redirect``
redirects to its own address; ``/set-cookies`` sets the platform's cookie and one of its own;
``/cookies?c=...&n=N`` sends each ``c`` as a ``Set-Cookie`` header, then N more (``many-I=1``);
``/gzip`` answers a gzipped text; ``/own-502`` answers a 502 of its own; ``/sized`` answers as
any other path, with its Content-Length (the others' answers are chunked); any other path
answers JSON: method, path, query, headers, cookies, body and its PORT.
WebSocket: picks the first subprotocol offered, sends the handshake's headers as JSON, then
echoes text and binary messages; ``close:CODE`` closes with that code.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qsl

RELEASED = asyncio.Event()
# answers with a Content-Length: status, headers, body
SIZED = {
    "/gzip": (200, [(b"content-encoding", b"gzip")], gzip.compress(b"zipped " * 100)),
    "/own-502": (502, [(b"content-type", b"text/plain")], b"the workload's own 502"),
}


def source() -> str:
    """This program's text, to run as ``python -c`` (only the tests read it)."""
    return Path(__file__).read_text()


async def app(scope, receive, send):  # noqa: ANN001, ANN201 - a bare ASGI app
    if scope["type"] == "websocket":
        await websocket(scope, receive, send)
    elif scope["type"] == "http":
        await http(scope, receive, send)


async def http(scope, receive, send):  # noqa: ANN001, ANN201
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/ready":
        await _reply(send, 200, [], b"ready")
        return
    if path == "/stream":
        await _start(send, 200, [(b"content-type", b"text/plain")])
        await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
        await RELEASED.wait()
        await send({"type": "http.response.body", "body": b"last\n"})
        return
    if path == "/release":
        RELEASED.set()
        await _reply(send, 200, [], b"released")
        return
    if path == "/redirect":
        own = f"http://{os.environ['GPUPOOL_LISTEN_HOST']}:{os.environ['PORT']}/landed?x=1"
        await _reply(send, 302, [(b"location", own.encode())], b"")
        return
    if path == "/set-cookies":
        cookies = [(b"set-cookie", b"gpupool_session=forged; Path=/")]
        cookies.append((b"set-cookie", b"theirs=kept; Path=/"))
        await _reply(send, 200, cookies, b"cookies")
        return
    if path == "/cookies":
        await _reply(send, 200, _asked_cookies(scope["query_string"].decode()), b"cookies")
        return
    if path == "/sized":
        await _sized(send, 200, [(b"content-type", b"application/json")], _said(scope, body))
        return
    if path in SIZED:
        await _sized(send, *SIZED[path])
        return
    await _reply(send, 200, [(b"content-type", b"application/json")], _said(scope, body))


async def websocket(scope, receive, send):  # noqa: ANN001, ANN201
    await receive()  # websocket.connect
    offered = scope.get("subprotocols") or []
    accept = {"type": "websocket.accept"}
    if offered:
        accept["subprotocol"] = offered[0]
    await send(accept)
    await send({"type": "websocket.send", "text": _said(scope, b"").decode()})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is not None and text.startswith("close:"):
            await send({"type": "websocket.close", "code": int(text[6:]), "reason": "asked"})
            return
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})


def _said(scope, body: bytes) -> bytes:  # noqa: ANN001
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
    cookie = SimpleCookie()
    for name, value in headers:
        if name == "cookie":
            cookie.load(value)
    return json.dumps(
        {
            "method": scope.get("method", "WEBSOCKET"),
            "path": scope["path"],
            "query": scope["query_string"].decode(),
            "headers": headers,
            "cookies": {name: morsel.value for name, morsel in cookie.items()},
            "body": body.decode("utf-8", "replace"),
            "port": os.environ.get("PORT"),
            "listen_host": os.environ.get("GPUPOOL_LISTEN_HOST"),
        }
    ).encode()


def _asked_cookies(query: str) -> list[tuple[bytes, bytes]]:
    asked = parse_qsl(query)
    cookies = [value for name, value in asked if name == "c"]
    count = int(dict(asked).get("n", "0"))
    cookies += [f"many-{i}=1; Path=/" for i in range(count)]
    return [(b"set-cookie", cookie.encode()) for cookie in cookies]


async def _start(send, status: int, headers: list) -> None:  # noqa: ANN001
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _sized(send, status: int, headers: list, body: bytes) -> None:  # noqa: ANN001
    await _reply(send, status, [*headers, (b"content-length", str(len(body)).encode())], body)


async def _reply(send, status: int, headers: list, body: bytes) -> None:  # noqa: ANN001
    await _start(send, status, headers)
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    import uvicorn

    host, port = os.environ["GPUPOOL_LISTEN_HOST"], int(os.environ["PORT"])
    uvicorn.run(app, host=host, port=port, log_level="warning", ws="websockets-sansio")
