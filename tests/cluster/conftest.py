"""One pool per session for the tests that do not kill its parts: a server with --ray (its
own machine is node ``head``, 2 A100) and two joined nodes (``n1``: 4 H100, ``n2``: 2 L40S)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cli import Cli
from tests.support.pool import Pool, need_loopback_namespace
from tests.support.wheels import index_env, wheelhouse


@pytest.fixture(scope="session")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    need_loopback_namespace()
    # environments of this pool resolve and build from a directory of wheels, on every node
    wheels = wheelhouse(tmp_path_factory.mktemp("wheels"))
    started = Pool.start(tmp_path_factory.mktemp("pool"), env=index_env(wheels))
    try:
        started.join("n1", "4xH100-SXM5-80GB:80GiB")
        started.join("n2", "2xL40S:48GiB")
        yield started
    finally:
        started.stop()


@pytest.fixture
def pool_cli(pool: Pool) -> Cli:
    return Cli(pool.server.url, pool.server.token)
