"""The model registry through the API, in process, with real jobs (a real runner in its
sandbox) writing real outputs: versions registered from a finished job's outputs, numbered
1, 2, 3 ..., holding the files with their checksums, the job's spec and final metrics, and
one archive a node unpacks; bad paths and unfinished jobs refused with a clear 4xx."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.domain.code import CodeLimits
from gpupool.executors.code import unpack_once
from gpupool.services.platform import Platform
from gpupool.store.models import JobMetricModel
from tests.support.platform import make_settings, refused, running_app, submit, wait_job

MODELS = "/api/v1/models"
# what the job leaves in its outputs: a model directory, a file beside it, and a link to it
WRITE_OUTPUTS = (
    'cd "$GPUPOOL_OUTPUT_DIR" && mkdir -p model/tokenizer && '
    "printf 'weights-%s' 12345 > model/weights.bin && echo '{\"layers\": 2}' > model/config.json"
    " && echo vocab > model/tokenizer/vocab.txt && echo notes > notes.txt"
    " && ln -s ../notes.txt model/notes-link.txt && mkdir empty"
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, Platform]]:
    """One platform per database kind for the module (its jobs run once per kind)."""
    data = tmp_path_factory.mktemp("models") / "data"
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").migrated_database()
    with running_app(make_settings(data, url, max_model_bytes=64 * 1024)) as running:
        yield running


@pytest.fixture(scope="module")
def finished(app: tuple[TestClient, Platform]) -> dict[str, int]:
    """The module's jobs, run at once: one that succeeded, one that failed, one running."""
    client, platform = app
    ok = submit(client, ["sh", "-c", WRITE_OUTPUTS], name="train")
    failed = submit(client, ["sh", "-c", 'echo partial > "$GPUPOOL_OUTPUT_DIR/w.bin"; exit 3'])
    running = submit(client, ["sleep", "300"])
    assert wait_job(client, ok["id"])["status"] == "succeeded"
    assert wait_job(client, failed["id"])["status"] == "failed"
    wait_job(client, running["id"], {"running"})
    _report_metrics(platform, ok["id"])
    return {"ok": ok["id"], "failed": failed["id"], "running": running["id"]}


def register(client: TestClient, name: str, job_id: int, **fields: object):  # noqa: ANN201
    return client.post(f"{MODELS}/{name}/versions", json={"job_id": job_id, **fields})


def outputs_of(platform: Platform, job_id: int) -> Path:
    return platform.settings.jobs_dir / str(job_id) / "outputs"


def test_versions_hold_the_jobs_files_with_checksums_spec_and_final_metrics(
    app: tuple[TestClient, Platform], finished: dict[str, int], tmp_path: Path
) -> None:
    client, platform = app
    first = register(client, "resnet", finished["ok"], path="model", description="first try")
    assert first.status_code == 201, first.text
    again = register(client, "resnet", finished["ok"], path="model")
    assert again.status_code == 201, again.text

    one, two = first.json(), again.json()
    assert (one["version"], two["version"]) == (1, 2)
    assert one["name"] == "resnet" and one["team"] == "default" and one["created_by"] == "admin"
    assert one["source_job_id"] == finished["ok"] and one["source_path"] == "model"
    assert one["spec"]["command"] == ["sh", "-c", WRITE_OUTPUTS]
    assert one["metrics"] == {"loss": 0.125, "accuracy": 0.9}
    assert one["description"] == "first try" and "archive_path" not in one
    source = outputs_of(platform, finished["ok"]) / "model"
    expected = {
        "config.json": (source / "config.json").read_bytes(),
        "notes-link.txt": b"notes\n",  # a link inside the outputs: a copy of its file
        "tokenizer/vocab.txt": b"vocab\n",
        "weights.bin": b"weights-12345",
    }
    assert one["files"] == [
        {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for path, data in expected.items()
    ]
    assert one["size_bytes"] == sum(len(data) for data in expected.values())
    assert two["archive"] == one["archive"]  # the same files: stored once

    unpacked = tmp_path / "unpacked"
    unpack_once(stored_archive(platform, one["archive"]), unpacked, CodeLimits())
    assert {p: (unpacked / p).read_bytes() for p in expected} == expected


def test_the_model_lists_and_shows_its_versions_newest_first(
    app: tuple[TestClient, Platform], finished: dict[str, int]
) -> None:
    client, _ = app
    for _ in range(2):
        assert register(client, "listed", finished["ok"], path="notes.txt").status_code == 201

    listed = {m["name"]: m for m in client.get(MODELS).json()}
    shown = client.get(f"{MODELS}/listed").json()
    version = client.get(f"{MODELS}/listed/versions/1").json()

    assert listed["listed"]["latest_version"] == 2 and listed["listed"]["version_count"] == 2
    assert [v["version"] for v in shown["versions"]] == [2, 1]
    assert version["files"] == [
        {"path": "notes.txt", "size": 6, "sha256": hashlib.sha256(b"notes\n").hexdigest()}
    ]
    refused(client.get(f"{MODELS}/listed/versions/9"), 404, "not_found")
    refused(client.get(f"{MODELS}/nothing-here"), 404, "not_found")


def test_the_whole_outputs_leave_the_platforms_own_files_out(
    app: tuple[TestClient, Platform], finished: dict[str, int]
) -> None:
    client, platform = app
    assert (outputs_of(platform, finished["ok"]) / ".gpupool").is_dir()  # its launch plans

    answer = register(client, "whole", finished["ok"])

    assert answer.status_code == 201, answer.text
    paths = [f["path"] for f in answer.json()["files"]]
    assert "notes.txt" in paths and "model/weights.bin" in paths
    assert not any(p.startswith(".gpupool") for p in paths)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("../1/outputs", "bad_model_path"),
        ("/etc", "bad_model_path"),
        ("model/../../..", "bad_model_path"),
        ("no-such-dir", "bad_model_path"),
        ("empty", "no_model_files"),
    ],
)
def test_a_path_outside_the_outputs_or_without_files_is_refused(
    app: tuple[TestClient, Platform], finished: dict[str, int], path: str, code: str
) -> None:
    client, _ = app
    answer = register(client, "bad-path", finished["ok"], path=path)
    error = refused(answer, 422 if code == "bad_model_path" else 409, code)
    assert "outputs" in error["message"] or "files" in error["message"]


def test_an_unfinished_or_failed_job_is_refused_and_a_failed_one_taken_when_asked(
    app: tuple[TestClient, Platform], finished: dict[str, int]
) -> None:
    client, _ = app
    running = refused(register(client, "partial", finished["running"]), 409, "job_not_ended")
    failed = refused(register(client, "partial", finished["failed"]), 409, "job_not_succeeded")
    taken = register(client, "partial", finished["failed"], allow_failed=True)

    assert "half written" in running["message"]
    assert "--allow-failed" in failed["message"]
    assert taken.status_code == 201, taken.text
    assert [f["path"] for f in taken.json()["files"]] == ["w.bin"]


def test_a_bad_name_a_wrong_team_and_a_model_too_large_are_refused(
    app: tuple[TestClient, Platform], finished: dict[str, int]
) -> None:
    client, platform = app
    refused(register(client, "-dash", finished["ok"]), 422, "invalid_model_name")
    refused(register(client, "ok-name", finished["ok"], team="other"), 422, "invalid_request")
    big = outputs_of(platform, finished["ok"]) / "big"
    big.mkdir()
    (big / "blob.bin").write_bytes(b"\0" * (64 * 1024 + 1))
    refused(register(client, "big", finished["ok"], path="big"), 413, "model_too_large")
    assert not list((platform.settings.models_dir / "incoming").iterdir())  # nothing left


def stored_archive(platform: Platform, ref: str) -> Path:
    return platform.settings.models_dir / "sha256" / f"{ref.removeprefix('sha256:')}.tar.gz"


def _report_metrics(platform: Platform, job_id: int) -> None:
    """The job's metrics as the server keeps them (its final values are each one's last)."""
    points = [("loss", 1, 0.5), ("loss", 2, 0.125), ("accuracy", 2, 0.9)]
    with platform.db.session() as session:
        session.add_all(
            JobMetricModel(job_id=job_id, attempt=1, name=name, step=step, at=1.0, value=value)
            for name, step, value in points
        )


def test_the_models_pages_show_versions_source_job_metrics_and_files(
    app: tuple[TestClient, Platform], finished: dict[str, int]
) -> None:
    client, _ = app
    assert register(client, "paged", finished["ok"], path="model").status_code == 201
    token = client.headers["Authorization"].removeprefix("Bearer ")
    signed_in = client.post("/api/v1/session", json={"user": "admin", "password": token})
    assert signed_in.status_code == 200, signed_in.text
    try:
        listing = client.get("/models")
        page = client.get("/models/default/paged")
        missing = client.get("/models/other-team/paged")
    finally:
        client.cookies.clear()

    assert listing.status_code == 200 and 'href="/models/default/paged"' in listing.text
    assert 'href="/models"' in listing.text and 'aria-current="page">Models' in listing.text
    assert page.status_code == 200
    assert f'href="/jobs/{finished["ok"]}"' in page.text
    assert "loss" in page.text and "0.125" in page.text
    assert hashlib.sha256(b"weights-12345").hexdigest() in page.text
    assert "tokenizer/vocab.txt" in page.text
    assert missing.status_code == 404 and "No model paged" in missing.text
