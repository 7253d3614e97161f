"""POST /api/v1/apply with Dataset and Volume documents, in process, on SQLite and
PostgreSQL: a version from an uploaded manifest or from an ended job's outputs and a volume,
made in the file's one transaction with the Job after them that reads and mounts them; a
file applied again makes no copy; a dry run makes nothing; a refused document leaves none
made."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.domain.datasets import ManifestFile, manifest_bytes
from gpupool.services.platform import Platform
from tests.support.platform import make_settings, refused, running_app, submit, wait_job

API = "/api/v1"
V1 = "gpupool/v1"
FILES = {"a.txt": b"hello\n", "sub/b.txt": b"bee\n"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, Platform]]:
    data = tmp_path_factory.mktemp("apply-datasets") / "data"
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_server").migrated_database()
    with running_app(make_settings(data, url)) as running:
        yield running


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def uploaded(client: TestClient, files: dict[str, bytes], skip: str | None = None) -> str:
    """The manifest of ``files`` and their blobs uploaded (all but ``skip``); its hex."""
    manifest = manifest_bytes(
        [ManifestFile(path, len(data), 0o644, sha(data)) for path, data in files.items()]
    )
    for blob in (manifest, *(d for p, d in files.items() if p != skip)):
        assert client.put(f"{API}/dataset-blobs/{sha(blob)}", content=blob).status_code == 200
    return sha(manifest)


def doc(kind: str, name: str, **spec: object) -> dict:
    return {"apiVersion": V1, "kind": kind, "metadata": {"name": name}, "spec": spec}


def apply(client: TestClient, documents: list[dict], dry_run: bool = False):  # noqa: ANN201
    return client.post(f"{API}/apply", json={"documents": documents, "dry_run": dry_run})


def versions(client: TestClient, name: str) -> list[int]:
    found = client.get(f"{API}/datasets/{name}")
    return [v["version"] for v in found.json()["versions"]] if found.status_code == 200 else []


def volume_names(client: TestClient) -> list[str]:
    return [v["name"] for v in client.get(f"{API}/volumes").json()]


def test_a_dataset_a_volume_and_the_job_that_uses_them_are_made_together(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    manifest = uploaded(client, FILES)
    reads = 'test "$(cat /datasets/corpus/a.txt)" = hello && echo made > /scratch/out.txt'
    documents = [
        doc("Dataset", "corpus", manifest=manifest, description="first cut"),
        doc("Volume", "scratch", size="1G"),
        doc(
            "Job",
            "train",
            command=["sh", "-c", reads],
            datasets=["corpus"],
            volumes=["scratch:/scratch"],
        ),
    ]

    answer = apply(client, documents)

    assert answer.status_code == 200, answer.text
    made = answer.json()["documents"]
    assert [(m["kind"], m["name"]) for m in made] == [
        ("Dataset", "corpus"), ("Volume", "scratch"), ("Job", "train"),
    ]  # fmt: skip
    assert made[0]["document"]["spec"] == {"manifest": manifest, "description": "first cut"}
    assert made[1]["document"]["spec"] == {"size_bytes": 1_000_000_000}
    job = wait_job(client, made[2]["id"])
    assert job["status"] == "succeeded", job
    assert job["spec"]["datasets"][0] | {"manifest": None} == {
        "name": "corpus", "version": 1, "mount": "/datasets/corpus", "manifest": None,
    }  # fmt: skip
    assert job["spec"]["volumes"][0]["id"] == made[1]["id"]
    shown = client.get(f"{API}/datasets/corpus/versions/1").json()
    assert shown["file_count"] == 2 and shown["description"] == "first cut"

    again = apply(client, documents[:2])  # the same file: the same version and volume
    assert again.status_code == 200, again.text
    assert [m["id"] for m in again.json()["documents"]] == [m["id"] for m in made[:2]]
    assert versions(client, "corpus") == [1]
    changed = uploaded(client, {**FILES, "a.txt": b"changed\n"})
    third = apply(client, [doc("Dataset", "corpus", manifest=changed)])
    assert third.status_code == 200, third.text
    assert versions(client, "corpus") == [2, 1]


def test_a_dry_run_checks_them_and_makes_nothing(app: tuple[TestClient, Platform]) -> None:
    client, _ = app
    manifest = uploaded(client, {"x.txt": b"dry\n"})
    documents = [
        doc("Dataset", "dry", manifest=manifest),
        doc("Volume", "dryvol"),
        doc("Job", "reads", command=["true"], datasets=["dry:/data"], volumes=["dryvol:/v"]),
    ]

    answer = apply(client, documents, dry_run=True)

    assert answer.status_code == 200, answer.text
    assert [m["id"] for m in answer.json()["documents"]] == [None, None, None]
    assert versions(client, "dry") == []
    assert "dryvol" not in volume_names(client)
    assert not [j for j in client.get(f"{API}/jobs").json() if j["name"] == "reads"]


def test_a_refused_document_leaves_the_dataset_and_volume_unmade(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    manifest = uploaded(client, {"y.txt": b"why\n", "z.txt": b"zed\n"}, skip="z.txt")
    documents = [
        doc("Volume", "never"),
        doc("Dataset", "half", manifest=manifest),
        doc("Job", "j", command=["true"], datasets=["half"]),
    ]

    dry = apply(client, documents, dry_run=True)  # the CLI uploads them after a dry run
    assert dry.status_code == 200, dry.text
    error = refused(apply(client, documents), 409, "blobs_missing")

    assert error["message"].startswith("document 2 (Dataset half):")
    assert error["details"]["missing"] == [sha(b"zed\n")]
    assert "never" not in volume_names(client)
    assert versions(client, "half") == []
    over = [doc("Volume", "never2"), doc("Job", "x", command=["true"], resources={"gpus": 99})]
    refused(apply(client, over), 422, "unsatisfiable")
    assert "never2" not in volume_names(client)


def test_what_the_server_cannot_take_is_refused_at_its_field(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    local = refused(
        apply(client, [doc("Dataset", "d", **{"from": "data/"})]), 422, "invalid_request"
    )  # noqa: E501
    assert local["details"]["fields"][0]["field"] == "documents.0.spec.from"
    assert "gpupool apply -f uploads it" in local["message"]
    none = refused(apply(client, [doc("Dataset", "d")]), 422, "invalid_request")
    assert "give one of from" in none["message"]
    bad = refused(apply(client, [doc("Dataset", "-d", from_job=1)]), 422, "invalid_dataset_name")
    assert bad["message"].startswith("document 1 (Dataset -d):")
    refused(apply(client, [doc("Volume", "v", size="lots")]), 422, "invalid_request")
    later = [
        doc("Job", "early", command=["true"], datasets=["late"]),
        doc("Dataset", "late", manifest="0" * 64),
    ]
    error = refused(apply(client, later), 422, "invalid_request")
    assert error["details"]["fields"][0]["field"] == "documents.0.spec.datasets.0"
    assert "comes later in the file" in error["message"]
    mounts = [doc("Job", "m", command=["true"], volumes=["v2:/v"]), doc("Volume", "v2")]
    error = refused(apply(client, mounts), 422, "invalid_request")
    assert error["details"]["fields"][0]["field"] == "documents.0.spec.volumes.0"
    same = [doc("Job", "prep", command=["true"]), doc("Dataset", "out", fromJob="prep")]
    error = refused(apply(client, same), 422, "invalid_request")
    assert error["details"]["fields"][0]["field"] == "documents.1.spec.from_job"
    assert "has not run yet" in error["message"]


def test_a_version_is_made_from_an_ended_jobs_outputs_by_id_or_name(
    app: tuple[TestClient, Platform],
) -> None:
    client, _ = app
    script = 'cd "$GPUPOOL_OUTPUT_DIR" && mkdir -p out && echo one > out/1.txt'
    job = submit(client, ["sh", "-c", script], name="prep-outputs")
    assert wait_job(client, job["id"])["status"] == "succeeded"
    documents = [
        doc("Dataset", "prepped", fromJob="prep-outputs", path="out"),
        doc("Job", "uses", command=["test", "-f", "/datasets/prepped/1.txt"], datasets=["prepped"]),  # noqa: E501
    ]

    dry = apply(client, documents, dry_run=True)
    assert dry.status_code == 200, dry.text
    assert versions(client, "prepped") == []
    answer = apply(client, documents)

    assert answer.status_code == 200, answer.text
    made = answer.json()["documents"]
    assert made[0]["document"]["spec"] == {"from_job": "prep-outputs", "path": "out"}
    shown = client.get(f"{API}/datasets/prepped/versions/1").json()
    assert shown["source_job_id"] == job["id"]
    assert [f["path"] for f in shown["files"]] == ["1.txt"]
    assert wait_job(client, made[1]["id"])["status"] == "succeeded"
    by_id = apply(client, [doc("Dataset", "prepped", from_job=job["id"], path="out")])
    assert by_id.status_code == 200, by_id.text
    assert versions(client, "prepped") == [2, 1]
    refused(apply(client, [doc("Dataset", "p", fromJob="no-such-job")]), 404, "not_found")
