"""Hostile jobs against the S3-compatible dataset store: a job of one team tries to read the
AWS credentials the server and its node use (their environment, the ~/.aws of the server's
account, the other processes' environments) and the node's cache of another team's version
(its files, what was fetched for it). Nothing leaks: the task carries no credentials, the
fetch runs in the runner before the sandbox exists and what it fetched is gone once the
version is whole. The store is moto's S3-protocol server on 127.0.0.1
(tests/support/s3.py: no real S3 server can be installed here)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.domain.datasets import ManifestFile, manifest_bytes
from tests.support.cli import FINAL, wait_for
from tests.support.s3 import CREDENTIALS, moto_server
from tests.support.server import ServerProcess

API = "/api/v1"
LABELS = b"vision-team-labels-s3-7d2f\n"
FILE_SECRET = "aws-secret-in-the-servers-home-9b4e"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A server on the S3 store, its credentials in its environment and in its account's
    ~/.aws; teams vision (a version holding LABELS, read once by its own job so that the
    node's cache has it) and audio."""
    home = tmp_path_factory.mktemp("server-home")
    (home / ".aws").mkdir(mode=0o700)
    credentials = home / ".aws" / "credentials"
    credentials.write_text(
        f"[other]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = {FILE_SECRET}\n"
    )
    credentials.chmod(0o600)
    with moto_server() as s3:
        env = s3.env() | {"HOME": str(home)}
        pool = ServerProcess(tmp_path_factory.mktemp("s3-hostile") / "data", env=env).start()
        try:
            admin = httpx.Client(
                base_url=pool.url, headers={"Authorization": f"Bearer {pool.token}"}
            )
            vic, ada = _user(admin, "vic", "vision"), _user(admin, "ada", "audio")
            manifest = _upload(admin, vic, "labels", {"labels.txt": LABELS})
            yield {"pool": pool, "admin": admin, "vic": vic, "ada": ada, "s3": s3} | {
                "manifest": manifest,
                "home": home,
            }
        finally:
            pool.stop()


def _user(admin: httpx.Client, name: str, team: str) -> dict[str, str]:
    assert admin.post(f"{API}/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": "member"}
    assert admin.post(f"{API}/users", json=body).status_code == 201
    token = admin.post(f"{API}/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _upload(admin: httpx.Client, headers: dict, name: str, files: dict[str, bytes]) -> str:
    manifest = manifest_bytes([ManifestFile(p, len(d), 0o644, sha(d)) for p, d in files.items()])
    for blob in [manifest, *files.values()]:
        put = admin.put(f"{API}/dataset-blobs/{sha(blob)}", content=blob, headers=headers)
        assert put.status_code == 200, put.text
    body = {"manifest": sha(manifest)}
    made = admin.post(f"{API}/datasets/{name}/versions", json=body, headers=headers)
    assert made.status_code == 201, made.text
    return sha(manifest)


def _run(world: dict, headers: dict, script: str, **fields: object) -> tuple[str, str]:
    admin = world["admin"]
    body = {"command": ["sh", "-c", script], **fields}
    made = admin.post(f"{API}/jobs", json=body, headers=headers)
    assert made.status_code == 201, made.text
    job_id = made.json()["id"]

    def status() -> str | None:
        found = admin.get(f"{API}/jobs/{job_id}", headers=headers).json()["status"]
        return found if found in FINAL else None

    ended = wait_for(status, what=f"job {job_id} to end")
    return ended, admin.get(f"{API}/jobs/{job_id}/logs", headers=headers).json()["text"]


def test_a_job_cannot_read_the_aws_credentials_of_the_server_or_its_node(world: dict) -> None:
    # its own team's dataset: its node fetched it with those credentials just before
    status, own = _run(world, world["vic"], "cat /datasets/labels/labels.txt", datasets=["labels"])
    assert (status, own) == ("succeeded", LABELS.decode())
    home = world["home"]
    script = (
        f"env; cat $HOME/.aws/credentials {home}/.aws/credentials /root/.aws/credentials;"
        " for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done; true"
    )

    status, text = _run(world, world["ada"], script)

    assert status == "succeeded"
    assert "PATH=" in text  # env printed the job's environment
    assert "AWS_" not in text, text
    for secret in (CREDENTIALS["AWS_SECRET_ACCESS_KEY"], CREDENTIALS["AWS_ACCESS_KEY_ID"]):
        assert secret not in text
    assert FILE_SECRET not in text
    assert FILE_SECRET in (home / ".aws" / "credentials").read_text()  # it was there to take


def test_a_job_cannot_read_the_node_cache_of_another_teams_version(world: dict) -> None:
    pool: ServerProcess = world["pool"]
    status, own = _run(world, world["vic"], "cat /datasets/labels/labels.txt", datasets=["labels"])
    assert (status, own) == ("succeeded", LABELS.decode())
    cache: Path = pool.data_dir / "dataset-cache"
    assert (cache / world["manifest"] / "labels.txt").read_bytes() == LABELS  # it is there
    assert not [p for p in cache.iterdir() if p.name.startswith(".fetch-")]  # fetched: gone
    script = (
        f"cat {cache}/{world['manifest']}/labels.txt; find {cache} {pool.data_dir} -type f"
        " -exec cat {} + 2>/dev/null; cat /datasets/*/* 2>/dev/null; true"
    )

    status, text = _run(world, world["ada"], script)

    assert status == "succeeded"
    assert LABELS.decode().strip() not in text
