"""Shared fixtures: paths, a real server subprocess, a real PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.images import Registry, missing_tools
from tests.support.postgres import PostgresServer
from tests.support.schema import migrated_sqlite
from tests.support.server import ServerProcess

# Property tests draw the same examples on every run, so a CI result does not depend on luck;
# HYPOTHESIS_PROFILE=explore searches new random examples (and remembers failures) instead.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# Every server a test starts (in process or not) keeps no disk reserve: each would hold 256 MiB
# of allocated blocks in its data directory, and a run starts hundreds of servers, whose
# directories pytest keeps (tens of GB). The reserve's own tests ask for one.
os.environ.setdefault("GPUPOOL_DISK_RESERVE_BYTES", "0")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the user's real gpupool config."""
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "client-config.json"))
    monkeypatch.delenv("GPUPOOL_URL", raising=False)
    monkeypatch.delenv("GPUPOOL_TOKEN", raising=False)


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: captured data lives beside the repository in CI")
    return SHARED


@pytest.fixture
def exchange() -> Iterator[Path]:
    """A directory a job and its test both use (markers, release files): passed as the job's
    working directory, the one place of the disk its sandbox shows read-write besides its
    own directories. pytest's tmp_path is private to the test's account (0700 parents), so
    a job running under its own Unix account could not be given it."""
    path = Path(tempfile.mkdtemp(prefix="gpupool-exchange-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real gpupool server with 4 declared A100 GPUs, on a fresh data directory."""
    process = ServerProcess(tmp_path / "data").start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer.find()
    if server is None:
        pytest.skip(PostgresServer.missing_reason())
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database at the schema's head, with no rows: a SQLite file, or a new database
    on the PostgreSQL server (copies of one migrated once: tests.support.schema; the tests
    of the migrations themselves get empty ones, tests/migrations/conftest.py)."""
    if request.param == "sqlite":
        return migrated_sqlite(tmp_path / "test.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.migrated_database()


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (-n N --dist loadgroup), keep each test module on one worker, so its
    module-scoped server starts once, and every test of the session's Ray pool (the
    ``pool`` fixture of tests/cluster) on one worker, so that pool starts once. A module
    that starts pools of its own is a group of its own: the other worker may take it."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        shared = path.startswith("tests/cluster/") and "pool" in item.fixturenames
        item.add_marker(pytest.mark.xdist_group("ray-pool" if shared else path))


@pytest.fixture(scope="session")
def image_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A real container registry on 127.0.0.1 (Debian's docker-registry) for the tests of
    container images, which push the images they build with ``tests.support.images``."""
    why = missing_tools()
    if why is not None:
        pytest.skip(why)
    registry = Registry(tmp_path_factory.mktemp("registry")).start()
    yield registry
    registry.stop()
