"""Where the throttle's counts come from: the account owning a local caller's socket, read from
the kernel's table of this machine's sockets (``api.peers``), with real sockets."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gpupool.api.peers import socket_owner


@contextmanager
def connected(family: int, host: str) -> Iterator[tuple[tuple, tuple]]:
    """A real connection on ``host``: the caller's address and the server's end."""
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        with socket.create_connection(server.getsockname()[:2]) as _caller:
            accepted, peer = server.accept()
            with accepted:
                yield peer[:2], accepted.getsockname()[:2]


def test_a_local_caller_is_told_by_the_account_owning_its_socket() -> None:
    with connected(socket.AF_INET, "127.0.0.1") as (peer, local):
        assert socket_owner(peer, local) == os.getuid()
        assert socket_owner(local, peer) == os.getuid()  # the server's own end is found too
        assert socket_owner((peer[0], peer[1] ^ 1), local) is None  # no such socket


def test_an_ipv6_local_caller_too() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        with connected(socket.AF_INET6, "::1") as (peer, local):
            owner = socket_owner(peer, local)
    except OSError as error:
        pytest.skip(f"no ::1 here: {error}")
    assert owner == os.getuid()


def test_a_remote_or_unnamed_caller_has_no_account() -> None:
    assert socket_owner(("10.9.8.7", 40000), ("127.0.0.1", 8000)) is None
    assert socket_owner(("testclient", 50000), ("testserver", 80)) is None
