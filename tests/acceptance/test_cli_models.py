"""The model registry from the real CLI against a real server: register a finished job's
outputs as versions of a model, list models, show a model and one version."""

from __future__ import annotations

import hashlib

import httpx

from tests.support.cli import FINAL, Cli, refused, wait_for
from tests.support.server import ServerProcess

WRITE = 'mkdir -p "$GPUPOOL_OUTPUT_DIR/model" && printf w8 > "$GPUPOOL_OUTPUT_DIR/model/w.bin"'


def ended(pool: ServerProcess, job_id: int) -> str:
    """Wait for the job's end through the API (cheaper than a CLI call per look)."""

    def status() -> str | None:
        answer = httpx.get(
            f"{pool.url}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {pool.token}"}
        )
        return answer.json()["status"] if answer.json()["status"] in FINAL else None

    return wait_for(status, what=f"job {job_id} to end")


def test_register_list_and_show_versions_of_a_model(pool: ServerProcess, admin: Cli) -> None:
    job_id = admin.submit("--name", "train", "--", "sh", "-c", WRITE)
    assert ended(pool, job_id) == "succeeded"

    first = admin.ok("model", "register", "resnet", "--from-job", str(job_id), "--path", "model")
    second = admin.json("model", "register", "resnet", "-j", str(job_id), "-p", "model", "-d", "v2")
    listed = admin.json("model", "ls")
    shown = admin.ok("model", "show", "resnet")
    version = admin.json("model", "show", "resnet:1")

    assert first.startswith(f"registered resnet:1 (team default) from job {job_id}: 1 files")
    assert (second["version"], second["description"]) == (2, "v2")
    assert [(m["name"], m["latest_version"], m["version_count"]) for m in listed] == [
        ("resnet", 2, 2)
    ]
    digest = hashlib.sha256(b"w8").hexdigest()
    assert "w.bin" in shown and digest in shown and "resnet:2" in shown
    assert version["files"] == [{"path": "w.bin", "size": 2, "sha256": digest}]
    assert version["source_job_id"] == job_id and version["spec"]["name"] == "train"

    assert refused(admin("model", "show", "resnet:latest"), "invalid_version")
    bad_path = admin("model", "register", "x", "-j", str(job_id), "-p", "../../etc")
    assert refused(bad_path, "bad_model_path")
    assert refused(admin("model", "show", "nothing"), "not_found")
