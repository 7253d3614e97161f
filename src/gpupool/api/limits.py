"""Pure ASGI middlewares: request bodies over a limit get a 413, unknown Host headers a 400."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.errors import HostNotAllowed, error_body


class BodyLimit:
    """Refuses a request body over ``max_bytes`` with a 413, except below ``own_limits``:
    path prefixes whose routes read their bodies as streams and hold them to a limit of their
    own (code snapshots)."""

    def __init__(self, app: ASGIApp, max_bytes: int, own_limits: tuple[str, ...] = ()) -> None:
        self.app, self.max_bytes, self.own_limits = app, max_bytes, own_limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._limits_itself(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen, refused = 0, False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes and not refused:
                refused = True
                await self._refuse(send)
                return {"type": "http.disconnect"}  # the app stops reading; its reply is dropped
            return message

        async def guarded(message: Message) -> None:
            if not refused:
                await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not refused:
                raise

    def _limits_itself(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.own_limits)

    async def _refuse(self, send: Send) -> None:
        message = f"the request body is larger than {self.max_bytes} bytes; send less"
        await _send_json(send, 413, error_body("payload_too_large", message))


class AllowedHosts:
    """Refuses, with a 400, a request whose Host header names none of ``hosts``.

    A page of another site whose name an attacker points at 127.0.0.1 (DNS rebinding) reaches
    the server with that name in its Host header: refusing unknown names keeps such pages out.
    """

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: a 403
        else:
            await _send_json(send, 400, error_body(HostNotAllowed.code, HostNotAllowed().message))

    def _allowed(self, scope: Scope) -> bool:
        host = dict(scope.get("headers") or []).get(b"host", b"")
        return host_name(host.decode("latin-1")) in self.hosts


def host_name(host: str) -> str:
    """The name of a Host header, lower case, without its port: '[::1]:8765' -> '::1'."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else ""
    name, _, port = host.rpartition(":")
    if not name or ":" in name or not port.isdigit():  # no port (or a bare IPv6 address)
        return host.rstrip(".")
    return name.rstrip(".")


async def _send_json(send: Send, status: int, content: dict) -> None:
    body = json.dumps(content).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
