"""Code snapshots through the API, in process, on SQLite and on PostgreSQL: upload, store once,
who may run them, and a job that runs in its unpacked code (a real runner, in its sandbox)."""

from __future__ import annotations

import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.code import archive, packed, ref, regular, special, tree
from tests.support.platform import make_settings, refused, running_app, submit, wait_job

CODE = "/api/v1/code"
MAX_CODE_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024  # other requests' bodies: a snapshot may be larger


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Platform]]:
    settings = make_settings(
        tmp_path / "data",
        database_url,
        max_code_bytes=MAX_CODE_BYTES,
        max_body_bytes=MAX_BODY_BYTES,
    )
    with running_app(settings) as (client, platform):
        for team in ("vision", "audio"):
            assert client.post("/api/v1/teams", json={"name": team}).status_code == 201
        yield client, platform


@pytest.fixture
def client(app: tuple[TestClient, Platform]) -> TestClient:
    return app[0]


def member(client: TestClient, name: str, team: str) -> dict[str, str]:
    """The headers of a new member of ``team``."""
    body = {"name": name, "teams": [team]}
    assert client.post("/api/v1/users", json=body).status_code == 201
    created = client.post("/api/v1/tokens", json={"name": "t", "user": name})
    return {"Authorization": f"Bearer {created.json()['token']}"}


def upload(client: TestClient, data: bytes, headers: dict[str, str] | None = None) -> dict:
    answer = client.put(f"{CODE}/{ref(data)}", content=data, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


def stored(platform: Platform, data: bytes) -> Path:
    return platform.settings.code_dir / "sha256" / f"{ref(data).split(':')[1]}.tar.gz"


def test_an_upload_is_stored_once_by_its_hash(
    app: tuple[TestClient, Platform], tmp_path: Path
) -> None:
    client, platform = app
    data = packed(tree(tmp_path / "src", {"train.py": "print(1)\n", "lib/util.py": "x = 2\n"}))

    shown = upload(client, data)

    assert shown == {"ref": ref(data), "size_bytes": len(data), "files": 2, "unpacked_bytes": 15}
    path = stored(platform, data)
    assert path.read_bytes() == data and oct(path.stat().st_mode & 0o777) == oct(0o400)
    inode = path.stat().st_ino
    assert upload(client, data) == shown  # idempotent
    assert path.stat().st_ino == inode
    assert client.get(f"{CODE}/{ref(data)}").json() == shown
    assert list((platform.settings.code_dir / "incoming").iterdir()) == []


def test_the_limits_are_told_before_an_upload(client: TestClient) -> None:
    limits = client.get(CODE).json()
    assert limits["max_bytes"] == MAX_CODE_BYTES
    assert limits["max_unpacked_bytes"] == 1024**3 and limits["max_entries"] == 100_000


def test_an_archive_under_another_hash_is_refused_and_not_kept(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    data, other = archive(regular("a.txt", b"a")), archive(regular("b.txt", b"b"))
    error = refused(client.put(f"{CODE}/{ref(other)}", content=data), 422, "code_hash_mismatch")
    assert ref(data) in error["message"] and error["details"]["ref"] == ref(data)
    assert not stored(platform, data).exists() and not stored(platform, other).exists()
    refused(client.get(f"{CODE}/{ref(other)}"), 404, "code_not_found")


def test_a_hostile_archive_is_refused_naming_its_member(app: tuple[TestClient, Platform]) -> None:
    client, platform = app
    data = archive(regular("ok.py"), special("keys", tarfile.SYMTYPE, "/root/.ssh/id_rsa"))
    error = refused(client.put(f"{CODE}/{ref(data)}", content=data), 422, "bad_code_archive")
    assert "member 'keys'" in error["message"] and "symbolic link" in error["message"]
    assert error["details"]["member"] == "keys"
    assert not stored(platform, data).exists()
    traversal = archive(regular("../../../etc/cron.d/x"))
    refused(client.put(f"{CODE}/{ref(traversal)}", content=traversal), 422, "bad_code_archive")
    refused(client.put(f"{CODE}/{ref(b'junk')}", content=b"junk"), 422, "bad_code_archive")


def test_too_large_is_413_with_the_cap_announced_or_streamed(client: TestClient) -> None:
    big = bytes(MAX_CODE_BYTES + 1)
    error = refused(client.put(f"{CODE}/{ref(big)}", content=big), 413, "code_too_large")
    assert error["details"] == {"size_bytes": MAX_CODE_BYTES + 1, "max_bytes": MAX_CODE_BYTES}
    assert "GPUPOOL_MAX_CODE_BYTES" in error["message"] and ".gpupoolignore" in error["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        for _ in range(4):
            yield bytes(MAX_CODE_BYTES // 2)

    streamed = client.put(f"{CODE}/{ref(big)}", content=chunks())
    assert refused(streamed, 413, "code_too_large")["details"]["max_bytes"] == MAX_CODE_BYTES


def test_a_snapshot_may_be_larger_than_any_other_body(client: TestClient) -> None:
    data = archive(regular("weights.bin", os.urandom(2 * MAX_BODY_BYTES)))  # incompressible
    assert MAX_BODY_BYTES < len(data) < MAX_CODE_BYTES
    assert upload(client, data)["size_bytes"] == len(data)
    too_long = {"command": ["true"], "name": "x" * MAX_BODY_BYTES}
    refused(client.post("/api/v1/jobs", json=too_long), 413, "payload_too_large")


def test_post_names_the_upload_itself(client: TestClient) -> None:
    data = archive(regular("a.py", b"print()"))
    answer = client.post(CODE, content=data)
    assert answer.status_code == 201, answer.text
    assert answer.json()["ref"] == ref(data)


def test_a_job_runs_in_its_unpacked_code_and_writes_there_as_its_account(
    app: tuple[TestClient, Platform], tmp_path: Path
) -> None:
    client, platform = app
    source = tree(tmp_path / "src", {".gitignore": "*.log\n", "main.py": "print('from main')\n"})
    (source / "debug.log").write_text("not sent")
    data = packed(source)
    upload(client, data)
    script = "import os; exec(open('main.py').read()); open('out.txt', 'w').write('mine');"
    script += "print(sorted(os.listdir('.')))"

    job = submit(client, [sys.executable, "-c", script], code=ref(data))
    done = wait_job(client, job["id"])

    assert done["status"] == "succeeded", done
    text = client.get(f"/api/v1/jobs/{job['id']}/logs").json()["text"]
    assert text == "from main\n['.gitignore', 'main.py', 'out.txt']\n"
    unpacked = platform.settings.jobs_dir / str(job["id"]) / "code"
    assert (unpacked / "out.txt").read_text() == "mine"
    assert done["spec"]["code"] == ref(data) and done["spec"]["workdir"] is None
    assert done["code_snapshot"] == {
        "ref": ref(data),
        "size_bytes": len(data),
        "files": 2,
        "unpacked_bytes": 25,
    }
    if os.geteuid() == 0:  # jobs run under an account of their own: the code is theirs
        owners = {path.stat().st_uid for path in [unpacked, *unpacked.iterdir()]}
        assert len(owners) == 1 and 0 not in owners


def test_code_and_workdir_together_are_refused(client: TestClient) -> None:
    data = archive(regular("a.py"))
    upload(client, data)
    body = {"command": ["true"], "code": ref(data), "workdir": "/tmp"}
    error = refused(client.post("/api/v1/jobs", json=body), 422, "code_with_workdir")
    assert "not both" in error["message"]


def test_a_ref_is_usable_by_its_uploader_and_their_team_only(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    ann, carl = member(client, "ann", "vision"), member(client, "carl", "vision")
    bob = member(client, "bob", "audio")
    data = archive(regular("secret_model.py", b"weights = 42"))
    upload(client, data, ann)
    inode = stored(platform, data).stat().st_ino
    body = {"command": ["true"], "code": ref(data)}

    assert client.post("/api/v1/jobs", json=body, headers=ann).status_code == 201
    assert client.post("/api/v1/jobs", json=body, headers=carl).status_code == 201  # teammate
    refused(client.get(f"{CODE}/{ref(data)}", headers=carl), 404, "code_not_found")  # not his
    taken = refused(client.post("/api/v1/jobs", json=body, headers=bob), 404, "code_not_found")
    unknown = {"command": ["true"], "code": "sha256:" + "0" * 64}
    never = refused(client.post("/api/v1/jobs", json=unknown, headers=bob), 404, "code_not_found")
    assert taken["message"].replace(ref(data), "REF") == never["message"].replace(
        unknown["code"], "REF"
    )  # another team's snapshot is answered as one that does not exist
    refused(client.get(f"{CODE}/{ref(data)}", headers=bob), 404, "code_not_found")

    upload(client, data, bob)  # the same bytes: bob may use them now, nothing stored anew
    assert client.post("/api/v1/jobs", json=body, headers=bob).status_code == 201
    assert stored(platform, data).stat().st_ino == inode
