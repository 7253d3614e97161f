"""POST /api/v1/apply in-process, on SQLite and PostgreSQL: a job file's documents (Jobs, a
Notebook, a Deployment) made in one transaction, all or none; a dry run checks them as a
submit would and makes nothing; the schemas of every kind for editors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.platform import make_settings, refused, running_app, wait_job

V1 = "gpupool/v1"


def job(name: str | None, **spec: object) -> dict:
    document: dict = {"apiVersion": V1, "kind": "Job", "spec": {"command": ["true"], **spec}}
    if name:
        document["metadata"] = {"name": name}
    return document


NOTEBOOK = {"apiVersion": V1, "kind": "Notebook", "metadata": {"name": "nb"}, "spec": {}}
DEPLOYMENT = {
    "apiVersion": V1,
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {"command": ["sleep", "300"], "replicas": 1},
}


@pytest.fixture
def client(tmp_path: Path, database_url: str) -> Iterator[TestClient]:
    with running_app(make_settings(tmp_path / "data", database_url)) as (client, _platform):
        yield client


def counts(client: TestClient) -> tuple[int, int, int]:
    jobs = client.get("/api/v1/jobs", params={"status": list(FINAL_AND_LIVE)}).json()
    notebooks = client.get("/api/v1/notebooks").json()
    deployments = client.get("/api/v1/deployments").json()
    return len(jobs), len(notebooks), len(deployments)


FINAL_AND_LIVE = ("pending", "starting", "running", "succeeded", "failed", "cancelled", "lost")


def test_a_file_of_every_kind_is_made_in_one_go(client: TestClient) -> None:
    documents = [
        job("prep"),
        job("train", depends_on=["prep"], resources={"gpus": 1}),
        job("sweep", depends_on=[{"job": "train", "condition": "afterany"}], array={"indexes": "0-2"}),  # noqa: E501
        NOTEBOOK,
        DEPLOYMENT,
    ]  # fmt: skip
    answer = client.post("/api/v1/apply", json={"documents": documents})
    assert answer.status_code == 200, answer.text
    made = answer.json()["documents"]
    assert [(m["kind"], m["name"]) for m in made] == [
        ("Job", "prep"), ("Job", "train"), ("Job", "sweep"), ("Notebook", "nb"),
        ("Deployment", "web"),
    ]  # fmt: skip
    prep, train, sweep = (m["id"] for m in made[:3])
    assert len(made[2]["job_ids"]) == 3 and made[2]["job_ids"][0] == sweep
    shown = client.get(f"/api/v1/jobs/{train}").json()
    assert shown["spec"]["depends_on"] == [{"job": prep, "condition": "afterok"}]
    task = client.get(f"/api/v1/jobs/{made[2]['job_ids'][2]}").json()
    assert task["spec"]["depends_on"] == [{"job": train, "condition": "afterany"}]
    assert made[1]["document"] == {
        "apiVersion": V1,
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"command": ["true"], "resources": {"gpus": 1.0}, "depends_on": [{"job": "prep"}]},
    }
    assert wait_job(client, made[2]["job_ids"][2])["status"] == "succeeded"
    assert client.get(f"/api/v1/notebooks/{made[3]['id']}").json()["name"] == "nb"
    assert client.get("/api/v1/deployments/web").status_code == 200


def test_one_refused_document_makes_none_of_them(client: TestClient) -> None:
    before = counts(client)
    documents = [job("a"), NOTEBOOK, DEPLOYMENT, job("b", team="no-such-team")]
    error = refused(
        client.post("/api/v1/apply", json={"documents": documents}), 422, "unknown_team"
    )
    assert error["message"].startswith("document 4 (Job b): ")
    assert counts(client) == before

    documents = [job("a"), job("b", resources={"gpus": 64})]
    error = refused(
        client.post("/api/v1/apply", json={"documents": documents}), 422, "unsatisfiable"
    )
    assert error["message"].startswith("document 2 (Job b): no node can run this job")
    assert counts(client) == before


def test_a_dry_run_checks_everything_and_makes_nothing(client: TestClient) -> None:
    before = counts(client)
    documents = [job("prep"), job("train", depends_on=["prep"]), NOTEBOOK, DEPLOYMENT]
    answer = client.post("/api/v1/apply", json={"documents": documents, "dry_run": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dry_run"] is True and all(m["id"] is None for m in body["documents"])
    assert counts(client) == before
    again = client.post(
        "/api/v1/apply",
        json={"documents": [m["document"] for m in body["documents"]], "dry_run": True},
    )
    assert [m["document"] for m in again.json()["documents"]] == [
        m["document"] for m in body["documents"]
    ]
    bad = [job("x", depends_on=["nothing-of-that-name"])]
    error = refused(
        client.post("/api/v1/apply", json={"documents": bad, "dry_run": True}),
        422,
        "unknown_dependency",
    )
    assert error["details"]["fields"][0]["field"] == "documents.0.spec.depends_on"


def test_field_errors_name_the_document_and_the_field(client: TestClient) -> None:
    documents = [job("ok"), job("bad", resources={"gpus": 0.5}, gpu_types=["A100"], nodes=0)]
    error = refused(
        client.post("/api/v1/apply", json={"documents": documents}), 422, "invalid_request"
    )
    assert error["message"].startswith("document 2 (Job bad): spec.nodes: ")
    assert error["details"]["fields"][0]["field"] == "documents.1.spec.nodes"

    documents = [job("typed", gpu_types=["A100"])]  # a GPU type without GPUs: its own code
    error = refused(
        client.post("/api/v1/apply", json={"documents": documents}), 422, "gpu_type_without_gpus"
    )
    assert error["details"]["fields"][0]["field"] == "documents.0.spec.gpu_types"

    clash = job("one")
    clash["spec"]["name"] = "two"
    error = refused(
        client.post("/api/v1/apply", json={"documents": [clash]}), 422, "invalid_request"
    )
    assert "metadata.name and spec.name differ" in error["message"]

    error = refused(
        client.post("/api/v1/apply", json={"documents": [{"apiVersion": V1, "kind": "Cron"}]}),
        422,
        "invalid_request",
    )
    assert error["details"]["fields"][0]["field"] == "documents.0.kind"
    wrong = {"apiVersion": "v2", "kind": "Job", "spec": {"command": ["true"]}}
    error = refused(
        client.post("/api/v1/apply", json={"documents": [wrong]}), 422, "invalid_request"
    )
    assert error["details"]["fields"][0]["field"] == "documents.0.apiVersion"
    refused(client.post("/api/v1/apply", json={"documents": []}), 422, "invalid_request")


def test_the_schemas_of_every_kind(client: TestClient) -> None:
    index = client.get("/api/v1/schemas/").json()
    assert [k["kind"] for k in index] == [
        "Job", "Environment", "Dataset", "Volume", "Notebook", "Deployment", "Experiment",
    ]  # fmt: skip
    for kind in index:
        schema = client.get(kind["schema_url"]).json()
        assert schema["properties"]["kind"] == {"const": kind["kind"]}
        assert schema["properties"]["apiVersion"] == {"const": V1}
        assert "name" not in schema["properties"]["spec"]["properties"]
    job_schema = client.get("/api/v1/schemas/Job").json()
    spec = job_schema["properties"]["spec"]["properties"]
    assert {"command", "resources", "depends_on", "array", "max_runtime_seconds"} <= spec.keys()
    dataset = client.get("/api/v1/schemas/Dataset").json()["properties"]["spec"]["properties"]
    assert {"from", "manifest", "from_job", "path", "description"} <= dataset.keys()
    volume = client.get("/api/v1/schemas/Volume").json()["properties"]["spec"]["properties"]
    assert {"size", "size_bytes", "team"} == volume.keys()  # size: as examples/ write it
    refused(client.get("/api/v1/schemas/Cron"), 404, "not_found")
