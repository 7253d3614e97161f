"""Datasets from the real CLI against a real server: a directory uploaded as version 1, a
changed copy as version 2 that sends only the changed file, a version from a job's outputs,
listing, showing and deleting versions, and clear refusals."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx

from tests.support.cli import FINAL, Cli, refused, wait_for
from tests.support.server import ServerProcess


def ended(pool: ServerProcess, job_id: int) -> str:
    def status() -> str | None:
        answer = httpx.get(
            f"{pool.url}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {pool.token}"}
        )
        return answer.json()["status"] if answer.json()["status"] in FINAL else None

    return wait_for(status, what=f"job {job_id} to end")


def test_create_a_dataset_from_a_directory_then_a_changed_copy(
    pool: ServerProcess, admin: Cli, tmp_path: Path
) -> None:
    data = tmp_path / "corpus"
    (data / "shards").mkdir(parents=True)
    for index in range(20):
        (data / "shards" / f"{index:02}.bin").write_bytes(os.urandom(1000))
    (data / "run.sh").write_text("#!/bin/sh\n")
    (data / "run.sh").chmod(0o755)
    (data / "link").symlink_to(data / "shards")  # a link to a directory: left out

    first = admin.ok("dataset", "create", "corpus", "--from", str(data), "-d", "first")
    (data / "shards" / "07.bin").write_bytes(b"changed")
    second = admin.json("dataset", "create", "corpus", "--from", str(data))
    listed = admin.json("dataset", "ls")
    shown = admin.ok("dataset", "show", "corpus")
    version = admin.json("dataset", "show", "corpus:1")

    assert first.startswith("corpus:1 (team default): 21 files")
    assert "uploaded 21 blobs" in first and "left out 1 links" in first
    assert second["version"] == 2 and second["file_count"] == 21
    assert [(d["name"], d["latest_version"], d["version_count"]) for d in listed] == [
        ("corpus", 2, 2)
    ]
    assert "corpus:2" in shown and hashlib.sha256(b"changed").hexdigest() in shown
    files = {f["path"]: f for f in version["files"]}
    assert files["run.sh"]["mode"] == 0o755 and files["shards/00.bin"]["mode"] == 0o644
    assert version["description"] == "first"

    again = admin.ok("dataset", "create", "corpus", "--from", str(data))
    assert "uploaded 0 blobs" in again  # nothing changed: only the manifest travelled

    assert admin.ok("dataset", "rm", "corpus:1").strip() == "deleted corpus:1"
    assert refused(admin("dataset", "show", "corpus:1"), "not_found")
    assert refused(admin("dataset", "show", "corpus:x"), "invalid_version")
    assert refused(
        admin("dataset", "create", "bad name", "--from", str(data)), "invalid_dataset_name"
    )
    assert refused(
        admin("dataset", "create", "x", "--from", str(tmp_path / "none")), "not_a_directory"
    )


def test_create_a_dataset_from_a_jobs_outputs(pool: ServerProcess, admin: Cli) -> None:
    write = 'mkdir -p "$GPUPOOL_OUTPUT_DIR/out" && printf abc > "$GPUPOOL_OUTPUT_DIR/out/a.txt"'
    job_id = admin.submit("--", "sh", "-c", write)
    assert ended(pool, job_id) == "succeeded"

    made = admin.json("dataset", "create", "outs", "--from-job", str(job_id), "--path", "out")

    assert (made["version"], made["file_count"], made["source_job_id"]) == (1, 1, job_id)
    assert refused(admin("dataset", "create", "outs", "--path", "out"), "invalid_request")


def test_a_job_run_with_a_dataset_and_a_volume(
    pool: ServerProcess, admin: Cli, tmp_path: Path
) -> None:
    (tmp_path / "in.txt").write_text("input\n")
    admin.ok("dataset", "create", "inputs", "--from", str(tmp_path / "in.txt"))
    made = admin.ok("volume", "create", "work", "--size", "1G")
    script = 'cat "$GPUPOOL_DATASET_INPUTS/in.txt" > /vol/copy.txt && cat /vol/copy.txt'

    job_id = admin.submit("--dataset", "inputs", "--volume", "work:/vol", "--", "sh", "-c", script)

    assert made.strip() == "volume work (team default)"
    assert ended(pool, job_id) == "succeeded", admin.ok("logs", str(job_id))
    assert admin.ok("logs", str(job_id)).strip() == "input"
    spec = admin.job(job_id)["spec"]
    assert spec["datasets"][0]["version"] == 1 and spec["volumes"][0]["mount"] == "/vol"
    listed = admin.json("volume", "ls")
    assert [(v["name"], v["size_limit_bytes"]) for v in listed] == [("work", 10**9)]
    assert admin.ok("volume", "rm", "work").strip() == "deleted volume work"
    assert refused(admin("volume", "rm", "work"), "not_found")
    assert refused(admin("volume", "create", "x", "--size", "lots"), "invalid_size")
    bad = admin("run", "--dataset", "nothing", "--", "true")
    assert refused(bad, "not_found")


def test_a_volume_past_its_size_is_shown_over_and_refused(pool: ServerProcess, admin: Cli) -> None:
    admin.ok("volume", "create", "tight", "--size", "1M")
    job_id = admin.submit(
        "--volume", "tight:/t", "--", "sh", "-c", "head -c 3000000 /dev/zero > /t/big.bin"
    )
    ended(pool, job_id)

    def scanned() -> dict | None:  # the storage scan measures it (every 10 s by default)
        found = {v["name"]: v for v in admin.json("volume", "ls")}["tight"]
        return found if (found["used_bytes"] or 0) >= 3_000_000 else None

    wait_for(scanned, timeout=60, what="the scan to measure the volume")
    table = admin.ok("volume", "ls")
    shown = admin.ok("volume", "show", "tight")
    refusal = admin("run", "--volume", "tight:/t", "--", "true")

    assert "OVER" in table and "tight" in table
    assert "used: 2.9 MiB" in shown and "OVER" in shown and "size: 976.6 KiB" in shown
    assert refused(refusal, "volume_full")
    assert admin.json("volume", "show", "tight")["used_bytes"] >= 3_000_000
    assert admin.ok("volume", "rm", "tight").strip() == "deleted volume tight"
