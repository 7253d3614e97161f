"""/serve's own HTTP/1.1 client (proxy._upstream) against a scripted replica on 127.0.0.1: each
way an answer can end (Content-Length, chunked, the connection's close, none), kept-alive
connections reused and stale ones dropped, and answers it refuses to pass on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from gpupool.proxy._upstream import Broken, Refused, TimedOut, UpstreamLimits, Upstreams
from tests.support.server import free_port

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
)
UNTIL_CLOSE = b"HTTP/1.0 200 OK\r\n\r\nuntil the end"
WHOLE = 1024


@dataclass
class Replica:
    """Answers each request with the next of ``answers`` (``close`` after it: hang up)."""

    answers: list[bytes | str]
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line[15:])
                        for line in head.split(b"\r\n")
                        if line.startswith(b"Content-Length: ")
                    ),
                    0,
                )
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer == "silent":
                    await reader.read()  # until the client gives up
                    return
                writer.write(answer)  # type: ignore[arg-type]
                await writer.drain()
                if self.answers and self.answers[0] == "close":
                    self.answers.pop(0)
                    return
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


@asynccontextmanager
async def replica(*answers: bytes | str) -> AsyncIterator[Replica]:
    found = Replica(list(answers))
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


async def ask(upstreams: Upstreams, found: Replica, method: str = "GET", body: bytes = b""):  # noqa: ANN201
    return await upstreams.request(method, ("127.0.0.1", found.port), "/p?q=1", [], body, WHOLE)


async def read(answer) -> bytes:  # noqa: ANN001
    if answer.body is not None:
        return answer.body
    return b"".join([chunk async for chunk in answer.chunks])


def test_small_answers_come_whole_over_one_kept_alive_connection() -> None:
    async def run() -> None:
        async with replica(OK, OK) as found:
            upstreams = Upstreams()
            first, second = await ask(upstreams, found), await ask(upstreams, found)
            assert (first.status, first.body, second.body) == (200, b"hello", b"hello")
            assert found.connections == 1
            await upstreams.aclose()

    asyncio.run(run())


def test_chunked_and_large_answers_are_streamed_and_the_connection_kept() -> None:
    big = b"x" * (WHOLE + 1)
    large = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big

    async def run() -> None:
        async with replica(CHUNKED, large, OK) as found:
            upstreams = Upstreams()
            chunked = await ask(upstreams, found)
            assert chunked.body is None and await read(chunked) == b"abcde"
            sized = await ask(upstreams, found)
            assert sized.body is None and await read(sized) == big
            assert (await ask(upstreams, found)).body == b"hello"
            assert found.connections == 1
            await upstreams.aclose()

    asyncio.run(run())


def test_an_answer_that_ends_with_the_connection_is_read_to_its_close() -> None:
    async def run() -> None:
        async with replica(UNTIL_CLOSE, "close") as found, replica(OK) as other:
            upstreams = Upstreams()
            assert await read(await ask(upstreams, found)) == b"until the end"
            assert upstreams._idle_one(("127.0.0.1", found.port)) is None  # not kept
            assert (await ask(upstreams, other)).body == b"hello"
            await upstreams.aclose()

    asyncio.run(run())


def test_an_answer_to_head_or_a_204_has_no_body_whatever_its_length_says() -> None:
    async def run() -> None:
        no_content = b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"
        async with replica(OK.removesuffix(b"hello"), no_content, OK) as found:
            upstreams = Upstreams()
            head = await ask(upstreams, found, "HEAD")
            assert head.body == b"" and ("Content-Length", "5") in head.headers
            assert (await ask(upstreams, found)).body == b""  # nor has a 204
            assert (await ask(upstreams, found)).body == b"hello"  # the same connection
            assert found.connections == 1
            await upstreams.aclose()

    asyncio.run(run())


def test_a_connection_the_replica_closed_while_idle_is_not_reused() -> None:
    async def run() -> None:
        async with replica(OK, "close", OK) as found:
            upstreams = Upstreams()
            assert (await ask(upstreams, found)).body == b"hello"
            idle = upstreams._idle[("127.0.0.1", found.port)][0]
            await idle.reader.read()  # the replica's end of file has arrived
            assert (await ask(upstreams, found)).body == b"hello"
            assert found.connections == 2
            await upstreams.aclose()

    asyncio.run(run())


def test_the_request_carries_the_replicas_host_and_its_own_length() -> None:
    async def run() -> None:
        async with replica(OK) as found:
            upstreams = Upstreams()
            headers = [("Content-Length", "999"), ("X-Forwarded-For", "10.0.0.1")]
            await upstreams.request(
                "POST", ("127.0.0.1", found.port), "/predict", headers, b"{}", WHOLE
            )
            sent = found.requests[0].decode()
            assert sent.startswith("POST /predict HTTP/1.1\r\n")
            assert f"Host: 127.0.0.1:{found.port}\r\n" in sent
            assert "Content-Length: 2\r\n" in sent and "999" not in sent
            assert sent.endswith("\r\n\r\n{}")
            await upstreams.aclose()

    asyncio.run(run())


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A 1\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * (70 * 1024) + b"\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\ncut",
    ],
)
def test_answers_it_will_not_pass_on_are_broken(answer: bytes) -> None:
    async def run() -> None:
        async with replica(answer, "close") as found:
            upstreams = Upstreams()
            with pytest.raises(Broken):
                await read(await ask(upstreams, found))
            await upstreams.aclose()

    asyncio.run(run())


def test_a_folded_header_line_is_passed_on_unfolded() -> None:
    folded = b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  2\r\nContent-Length: 5\r\n\r\nhello"

    async def run() -> None:
        async with replica(folded) as found:
            upstreams = Upstreams()
            answer = await ask(upstreams, found)
            assert ("X-A", "1 2") in answer.headers and answer.body == b"hello"
            await upstreams.aclose()

    asyncio.run(run())


def test_a_request_that_cannot_be_sent_as_it_is_is_refused_before_sending() -> None:
    async def run() -> None:
        async with replica(OK) as found:
            upstreams = Upstreams()
            address = ("127.0.0.1", found.port)
            with pytest.raises(Broken):
                await upstreams.request("GET", address, "/a b", [], b"", WHOLE)
            for header in [("X-A", "1\r\nX-B: 2"), ("X-A", "1\x00"), ("X A", "1")]:
                with pytest.raises(Broken):
                    await upstreams.request("GET", address, "/", [header], b"", WHOLE)
            with pytest.raises(Broken):
                await upstreams.request("GET", address, "http://elsewhere/", [], b"", WHOLE)
            assert found.requests == []
            await upstreams.aclose()

    asyncio.run(run())


def test_a_refused_connection_and_a_silent_replica() -> None:
    async def run() -> None:
        with pytest.raises(Refused):
            await Upstreams().request("GET", ("127.0.0.1", free_port()), "/", [], b"", WHOLE)
        async with replica("silent") as found:
            upstreams = Upstreams(UpstreamLimits(read_seconds=0.2))
            with pytest.raises(TimedOut):
                await ask(upstreams, found)
            await upstreams.aclose()

    asyncio.run(run())
