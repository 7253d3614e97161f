"""An in-process platform (real database, real local executor) behind FastAPI's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

import gpupool.services.identity._auth as auth
import gpupool.services.identity._users as users
from gpupool.api.app import create_app
from gpupool.executors.base import Executor
from gpupool.platform import open_platform
from gpupool.scheduler import schedule
from gpupool.scheduler.state import Schedule
from gpupool.scheduler.types import Clock
from gpupool.services.platform import Platform
from gpupool.settings import Settings
from tests.support.cleanup import kill_leftovers
from tests.support.schema import seed_data_dir
from tests.support.waiting import wait_for

FINAL = {"succeeded", "failed", "cancelled", "lost"}


def make_settings(data_dir: Path, database_url: str | None = None, **overrides: Any) -> Settings:
    """A server's settings for tests; a data directory without a database of its own (no
    ``database_url``) gets a migrated one (``tests.support.schema``)."""
    if database_url is None:
        seed_data_dir(data_dir)
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "database_url": database_url,
        "declared_gpus": "4xA100-SXM4-80GB:80GiB",
        "declared_cpus": 64,
        "declared_memory": "256GiB",
        "use_nvml": False,
        "stop_grace_seconds": 2.0,
        "node_name": "node-a",
        "allowed_hosts": "testserver",  # the Host of FastAPI's TestClient
    }
    return Settings(**(values | overrides))


@contextmanager
def running_app(
    settings: Settings,
    executor: Executor | None = None,
    decide: Schedule = schedule,
    clock: Clock | None = None,
) -> Iterator[tuple[TestClient, Platform]]:
    """The app on an opened platform; ``decide`` stands in for the scheduler when given."""
    platform = open_platform(settings, executor=executor, clock=clock, decide=decide)
    with TestClient(create_app(platform)) as client:
        client.headers["Authorization"] = f"Bearer {admin_token(platform)}"
        yield client, platform
    platform.db.dispose()
    kill_leftovers(settings.jobs_dir)


def admin_token(platform: Platform) -> str:
    """The first start's token, or a new one for the admin of an existing database."""
    if platform.first_start:
        return platform.first_start.token
    with platform.db.session() as session:
        admin = users.get_user(session, auth.ADMIN)
        return auth.create_token(session, admin, "test", platform.clock.now())[0]


def wait_job(
    client: TestClient, job_id: int, statuses: set[str] = FINAL, timeout: float = 30.0
) -> dict:
    def check() -> dict | None:
        job = client.get(f"/api/v1/jobs/{job_id}").json()
        return job if job["status"] in statuses else None

    def seen() -> dict:  # why it was not there yet, for the failure
        job = client.get(f"/api/v1/jobs/{job_id}").json()
        return {k: job.get(k) for k in ("status", "reason", "message", "events", "attempts")}

    what = f"job {job_id} to be {'/'.join(sorted(statuses))}"
    return wait_for(check, timeout, what, 0.05, about=seen)


def submit(client: TestClient, command: list[str], **fields: Any) -> dict:
    response = client.post("/api/v1/jobs", json={"command": command, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def refused(response, status: int, code: str) -> dict:  # noqa: ANN001 - an httpx response
    """The error body of a response that must be refused with ``status`` and ``code``."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return error


def create_user(client: TestClient, name: str, **fields: object) -> dict:
    """A new user of the default team, made by the admin ``client``."""
    body = {"name": name, "teams": ["default"]} | fields
    created = client.post("/api/v1/users", json=body)
    assert created.status_code == 201, created.text
    return created.json()
