"""What the proxy passes on, as data: the platform's credentials never, every other cookie and
header yes, hop-by-hop headers never, X-Forwarded-* from what the server saw."""

from __future__ import annotations

from gpupool.proxy._forwarding import (
    MAX_SET_COOKIES,
    NO_COOKIES,
    Caller,
    CookieRule,
    confined_path,
    cookies_over_limit,
    request_headers,
    response_headers,
    without_platform_cookies,
)

CALLER = Caller(address="10.1.2.3", scheme="https", host="gpu.example.com")
UPSTREAM = "http://127.0.0.1:41000"


def names(headers: list[tuple[str, str]]) -> list[str]:
    return [name.lower() for name, _ in headers]


def test_the_platforms_credentials_are_left_out_and_other_headers_kept() -> None:
    sent = request_headers(
        [
            ("Authorization", "Bearer gp_secret"),
            ("X-CSRF-Token", "csrf"),
            ("X-Gpupool-User", "admin"),
            ("x-gpupool", "x"),
            ("Cookie", "gpupool_session=s3cret; _xsrf=2|ab; theme=dark"),
            ("Accept", "text/html"),
            ("X-Custom", "kept"),
        ],
        CALLER,
        UPSTREAM,
    )
    assert ("Cookie", "_xsrf=2|ab; theme=dark") in sent
    assert ("Accept", "text/html") in sent and ("X-Custom", "kept") in sent
    assert not {"authorization", "x-csrf-token", "x-gpupool-user", "x-gpupool"} & set(names(sent))
    assert "s3cret" not in repr(sent) and "gp_secret" not in repr(sent)


def test_a_cookie_header_of_the_platforms_cookie_alone_is_dropped() -> None:
    sent = request_headers(
        [("cookie", "gpupool_session=a"), ("COOKIE", " gpupool_session=b ")], CALLER, UPSTREAM
    )
    assert "cookie" not in names(sent)
    assert without_platform_cookies("a=1;gpupool_session=x;b=2") == "a=1;b=2"
    assert without_platform_cookies("__Host-gpupool_session=x; c=3") == "c=3"
    assert without_platform_cookies("gpupool_session_other=1") == "gpupool_session_other=1"


def test_hop_by_hop_and_the_clients_own_forwarding_headers_are_not_passed_on() -> None:
    sent = request_headers(
        [
            ("Connection", "keep-alive, X-Private"),
            ("X-Private", "for this hop"),
            ("Keep-Alive", "timeout=5"),
            ("Transfer-Encoding", "chunked"),
            ("TE", "trailers"),
            ("Proxy-Authorization", "Basic x"),
            ("Host", "gpu.example.com"),
            ("Expect", "100-continue"),
            ("X-Forwarded-For", "6.6.6.6"),
            ("Forwarded", "for=6.6.6.6"),
            ("X-Real-IP", "6.6.6.6"),
        ],
        CALLER,
        UPSTREAM,
    )
    assert sent == [
        ("X-Forwarded-For", "10.1.2.3"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "gpu.example.com"),
    ]


def test_origin_and_referer_of_this_server_move_to_the_workloads_own() -> None:
    sent = dict(
        request_headers(
            [
                ("Origin", "https://gpu.example.com"),
                ("Referer", "https://gpu.example.com/n/1/lab?a"),
            ],
            CALLER,
            UPSTREAM,
        )
    )
    assert sent["Origin"] == UPSTREAM
    assert sent["Referer"] == f"{UPSTREAM}/n/1/lab?a"
    other = request_headers([("Origin", "https://evil.example")], CALLER, UPSTREAM)
    assert "origin" not in names(other)


def test_the_callers_extra_headers_win_over_the_clients() -> None:
    sent = request_headers(
        [("X-Token", "client's"), ("Accept", "*/*")], CALLER, UPSTREAM, {"X-Token": "ours"}
    )
    assert [v for n, v in sent if n.lower() == "x-token"] == ["ours"]


def test_a_websockets_handshake_is_left_to_the_proxys_own_client() -> None:
    sent = request_headers(
        [
            ("Sec-WebSocket-Key", "abc"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Protocol", "v1"),
            ("Sec-WebSocket-Extensions", "permessage-deflate"),
            ("Upgrade", "websocket"),
            ("Origin", "https://gpu.example.com"),
            ("Cookie", "gpupool_session=s; _xsrf=1"),
        ],
        CALLER,
        UPSTREAM,
        websocket=True,
    )
    assert names(sent) == ["cookie", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"]
    assert sent[0] == ("Cookie", "_xsrf=1")


def test_a_workload_cannot_set_the_platforms_cookie() -> None:
    back = response_headers(
        [
            ("Set-Cookie", "gpupool_session=forged; Path=/; HttpOnly"),
            ("set-cookie", "__Secure-gpupool_session=forged"),
            ("Set-Cookie", "_xsrf=1; Path=/"),
            ("Content-Type", "text/html"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "close"),
        ],
        UPSTREAM,
        CookieRule(path="/n/1/"),
    )
    assert back == [("Set-Cookie", "_xsrf=1; Path=/n/1/"), ("Content-Type", "text/html")]


def test_a_workloads_cookies_are_confined_to_its_path_and_capped() -> None:
    def confined(*cookies: str, rule: CookieRule = CookieRule(path="/n/1/")) -> list[str]:
        return [
            v for _, v in response_headers([("Set-Cookie", c) for c in cookies], UPSTREAM, rule)
        ]

    assert confined("a=1; Path=/n/1/lab; Domain=example.com; Priority=High; Secure") == [
        "a=1; Secure; Path=/n/1/lab"
    ]
    assert confined("a=1", "b=2; Path=/n/10/", "c=3; Path=/n/1/x; path=/") == [
        "a=1; Path=/n/1/",
        "b=2; Path=/n/1/",
        "c=3; Path=/n/1/",
    ]
    assert confined("=gpupool_session=x", "nameless", "__HOST-a=1; Path=/; Secure") == []
    assert confined("__Secure-a=1; Secure") == ["__Secure-a=1; Secure; Path=/n/1/"]
    assert confined("a=1", rule=NO_COOKIES) == []
    many = [f"c{i}=1" for i in range(MAX_SET_COOKIES + 5)]
    assert len(confined(*many)) == MAX_SET_COOKIES
    assert cookies_over_limit([("set-cookie", c) for c in many], CookieRule("/n/1/")) == 5
    assert cookies_over_limit([("set-cookie", c) for c in many], NO_COOKIES) == 0
    assert confined_path("/w/a;b c/") == "/w/a%3Bb%20c/"


def test_a_redirect_to_the_workloads_own_address_becomes_a_path() -> None:
    def location(value: str) -> str:
        return dict(response_headers([("Location", value)], UPSTREAM))["Location"]

    assert location(f"{UPSTREAM}/n/1/lab") == "/n/1/lab"
    assert location(f"{UPSTREAM}?a=1") == "/?a=1"
    assert location(UPSTREAM) == "/"
    assert location("/relative") == "/relative"
    assert (
        location("http://127.0.0.1:41000.evil.example/x") == "http://127.0.0.1:41000.evil.example/x"
    )
