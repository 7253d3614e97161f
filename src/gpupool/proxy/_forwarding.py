"""What the proxy passes on, both ways: pure functions over header lists, tested as data.

Towards a workload, the platform's own credentials never travel: its session cookie (every
other cookie does, such as Jupyter's ``_xsrf``), ``Authorization``, its CSRF header and any
``X-Gpupool-*`` header. The workload sees itself addressed at its own address (``Host``, and
``Origin``/``Referer`` of this server's pages), so that its own same-origin checks hold; the
``X-Forwarded-*`` headers say who really asked, and where. Back towards the client, a
redirect to the workload's own address is turned into a path on this server, and a workload's
cookies are confined (``CookieRule``): never the platform's cookie, never one that applies
beyond the path the workload is reached under (so that no workload's cookie reaches another
workload, or shadows the platform's), and never more than a few per answer (so that no
workload evicts the platform's cookie from a browser's jar).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from gpupool.domain.web import CSRF_HEADER, SESSION_COOKIE

Headers = list[tuple[str, str]]

# RFC 9110 7.6.1: meant for one connection, never forwarded (with those Connection names)
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
PLATFORM_COOKIES = frozenset({SESSION_COOKIE})
PLATFORM_HEADERS = frozenset({"authorization", CSRF_HEADER, "cookie2"})
PLATFORM_PREFIX = "x-gpupool"
# set by the proxy alone: a client's own values are not passed on as if they were ours
FORWARDING = frozenset(
    {"forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip"}
)
# what the proxy's client says for itself: the upstream's own Host; no 100-continue (this
# server has read on already)
OWN = frozenset({"host", "expect"})
# a cookie's attributes that a workload may not choose: where it applies (its path is set by
# the proxy), and how hard a browser keeps it when its jar is full (the platform's is High)
CONFINED_ATTRIBUTES = frozenset({"path", "domain", "priority"})
# browsers give these prefixes a meaning (RFC 6265bis 4.1.3), case-insensitively: a __Host-
# cookie must have Path=/, which no workload's cookie gets
HOST_PREFIX = "__host-"
MAX_SET_COOKIES = 20  # a workload's Set-Cookie headers passed on per answer: the rest dropped
# the handshake of a WebSocket: the proxy's client makes its own
WEBSOCKET_HANDSHAKE = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)


@dataclass(frozen=True)
class Caller:
    """Who asked, as this server saw it: the client's address, the scheme (http or https)
    and the Host it asked for."""

    address: str
    scheme: str
    host: str


@dataclass(frozen=True)
class CookieRule:
    """What becomes of a workload's ``Set-Cookie`` headers on their way to the client.

    ``path``: the path the workload is reached under on this server (``/notebooks/7/``); each
    cookie gets a ``Path`` inside it (its own when it already is, else this one), loses any
    ``Domain`` and ``Priority``, and a ``__Host-`` cookie (which needs ``Path=/``), a nameless
    one and the platform's own are dropped. None: every cookie is dropped (a deployment is an
    API). ``limit``: the most passed on per answer; the rest are dropped.
    """

    path: str | None
    limit: int = MAX_SET_COOKIES


NO_COOKIES = CookieRule(path=None)


def request_headers(
    headers: Iterable[tuple[str, str]],
    caller: Caller,
    upstream: str,
    extra: Mapping[str, str] | None = None,
    *,
    websocket: bool = False,
) -> Headers:
    """The headers to send to the workload at ``upstream`` (its origin, ``http://h:p``):
    the client's, less the platform's credentials, hop-by-hop and forwarding headers (and,
    for a WebSocket, its handshake), with ``Origin``/``Referer`` of this server rewritten to
    the upstream, then ``X-Forwarded-*`` and ``extra`` (which win over the client's)."""
    pairs = list(headers)
    dropped = _connection_names(pairs) | HOP_BY_HOP | PLATFORM_HEADERS | FORWARDING | OWN
    if websocket:
        dropped |= WEBSOCKET_HANDSHAKE | {"origin"}
    overridden = {name.lower() for name in (extra or {})}
    kept: Headers = []
    for name, value in pairs:
        lower = name.lower()
        if lower in dropped or lower in overridden or lower.startswith(PLATFORM_PREFIX):
            continue
        if lower == "cookie":
            value = without_platform_cookies(value)
            if not value:
                continue
        elif lower in ("origin", "referer"):
            value = _rebased(value, caller, upstream)
            if value is None:
                continue
        kept.append((name, value))
    return kept + forwarded_for(caller) + list((extra or {}).items())


def response_headers(
    headers: Iterable[tuple[str, str]], upstream: str, cookies: CookieRule = NO_COOKIES
) -> Headers:
    """The workload's response headers for the client: less hop-by-hop headers, its
    ``Set-Cookie`` headers as ``cookies`` says, and a ``Location`` on the workload's own
    address turned into a path on this server."""
    pairs = list(headers)
    dropped = _connection_names(pairs) | HOP_BY_HOP
    kept: Headers = []
    seen_cookies = 0
    for name, value in pairs:
        lower = name.lower()
        if lower in dropped:
            continue
        if lower == "set-cookie":
            seen_cookies += 1
            confined = _confined_cookie(value, cookies, seen_cookies)
            if confined is not None:
                kept.append((name, confined))
            continue
        if lower == "location":
            value = _local_location(value, upstream)
        kept.append((name, value))
    return kept


def cookies_over_limit(headers: Iterable[tuple[str, str]], cookies: CookieRule) -> int:
    """How many of the answer's ``Set-Cookie`` headers ``response_headers`` drops for being
    past ``cookies.limit`` (for the server's log; 0 where every cookie is dropped anyway)."""
    if cookies.path is None:
        return 0
    count = sum(1 for name, _ in headers if name.lower() == "set-cookie")
    return max(0, count - cookies.limit)


def confined_path(prefix: str) -> str:
    """The ``Path`` of the cookies of a workload reached under ``prefix`` (a request's path,
    as decoded): encoded as a browser sends it, so that no ``;`` can add an attribute."""
    return quote(prefix, safe="/:@!$&'()*+,=-._~")


def without_platform_cookies(header: str) -> str:
    """A ``Cookie`` header's value without the platform's cookies, the others kept as sent."""
    kept = [part for part in header.split(";") if _cookie_name(part) not in _platform_names()]
    return ";".join(kept).strip().strip(";").strip()


def forwarded_for(caller: Caller) -> Headers:
    """``X-Forwarded-For``/``-Proto``/``-Host`` from what this server saw (never from what
    the client wrote in its own such headers)."""
    return [
        ("X-Forwarded-For", caller.address),
        ("X-Forwarded-Proto", caller.scheme),
        ("X-Forwarded-Host", caller.host),
    ]


def _connection_names(headers: Headers) -> set[str]:
    """Headers a ``Connection`` header names: hop-by-hop for this connection only."""
    names: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            names |= {part.strip().lower() for part in value.split(",") if part.strip()}
    return names


def _cookie_name(part: str) -> str:
    return part.split("=", 1)[0].strip()


def _confined_cookie(value: str, cookies: CookieRule, position: int) -> str | None:
    """One ``Set-Cookie`` (the ``position``-th of its answer) as ``cookies`` lets it reach
    the client, or None when it does not."""
    if cookies.path is None or position > cookies.limit:
        return None
    pair, *attributes = value.split(";")
    name = _cookie_name(pair)
    if "=" not in pair or not name:
        return None  # a nameless cookie is sent back as its bare value: "=a=b" as "a=b"
    if name in _platform_names() or name.lower().startswith(HOST_PREFIX):
        return None
    own_path, kept = None, [pair.strip()]
    for attribute in attributes:
        key, _, attribute_value = attribute.partition("=")
        if key.strip().lower() == "path":
            own_path = attribute_value.strip()  # the last one wins, as in a browser
        elif key.strip().lower() not in CONFINED_ATTRIBUTES and attribute.strip():
            kept.append(attribute.strip())
    inside = own_path is not None and own_path.startswith(cookies.path)
    return "; ".join([*kept, f"Path={own_path if inside else cookies.path}"])


def _platform_names() -> frozenset[str]:
    """The platform's cookie names, also with the prefixes a browser gives special meaning."""
    return PLATFORM_COOKIES | {
        f"{p}{n}" for p in ("__Host-", "__Secure-") for n in PLATFORM_COOKIES
    }


def _rebased(value: str, caller: Caller, upstream: str) -> str | None:
    """An ``Origin`` or ``Referer`` of a page of this server, moved to the upstream's origin;
    one of another site is dropped (the platform refuses those before it proxies them)."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.netloc.lower() != caller.host.lower():
        return None
    rest = value[len(f"{parts.scheme}://{parts.netloc}") :]
    return upstream + rest


def _local_location(value: str, upstream: str) -> str:
    """``http://127.0.0.1:PORT/x`` (the workload's own address) -> ``/x``."""
    if value == upstream or value.startswith(upstream + "/"):
        return value[len(upstream) :] or "/"
    if value.startswith(upstream + "?"):
        return "/" + value[len(upstream) :]
    return value
