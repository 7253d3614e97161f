"""A model version registered from a job that ran on a joined Ray node: its outputs stay on
that node, whose agent packs them; the server fetches the archive and records the version
with the files' checksums. A link out of the outputs is refused there as on one machine."""

from __future__ import annotations

import hashlib

from tests.support.cli import Cli, refused, wait_status

WRITE = (
    'mkdir -p "$GPUPOOL_OUTPUT_DIR/model" && printf n1-weights > "$GPUPOOL_OUTPUT_DIR/model/w.bin"'
    ' && ln -s /etc/hostname "$GPUPOOL_OUTPUT_DIR/leak"'
)


def test_a_version_is_fetched_from_the_node_that_ran_the_job(pool_cli: Cli) -> None:
    job_id = pool_cli.submit("--gpus", "1", "--gpu-type", "H100", "--", "sh", "-c", WRITE)
    job = wait_status(pool_cli, job_id, {"succeeded", "failed"})
    assert (job["status"], job["placement"]["node"]) == ("succeeded", "n1"), job

    version = pool_cli.json("model", "register", "on-n1", "-j", str(job_id), "-p", "model")

    digest = hashlib.sha256(b"n1-weights").hexdigest()
    assert version["files"] == [{"path": "w.bin", "size": 10, "sha256": digest}]
    whole = pool_cli("model", "register", "on-n1", "-j", str(job_id))
    assert refused(whole, "bad_model_path") and "leak" in whole.stderr
