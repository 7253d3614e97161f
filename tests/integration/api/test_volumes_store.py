"""The volumes' store as a setting (GPUPOOL_VOLUMES_STORE: on a pool, a file system every
node shares): a job's volume is the store's directory, not the data directory's, and the
server measures it there."""

from __future__ import annotations

from pathlib import Path

from tests.support.platform import make_settings, running_app, submit, wait_job

API = "/api/v1"


def test_a_volume_lives_in_the_volumes_store_the_server_names(tmp_path: Path) -> None:
    shared = tmp_path / "shared-volumes"
    settings = make_settings(tmp_path / "data", volumes_store=shared)
    with running_app(settings) as (client, _platform):
        assert client.post(f"{API}/volumes", json={"name": "scratch"}).status_code == 201
        write = 'echo kept > /scratch/note.txt; echo "at $GPUPOOL_VOLUME_SCRATCH"'
        job = submit(client, ["sh", "-c", write], volumes=["scratch:/scratch"])
        done = wait_job(client, job["id"])
        text = client.get(f"{API}/jobs/{job['id']}/logs").json()["text"]
        assert done["status"] == "succeeded", text
        volume_id = done["spec"]["volumes"][0]["id"]
        assert (shared / str(volume_id) / "note.txt").read_text() == "kept\n"
        assert not (tmp_path / "data" / "volumes").exists()
        assert "at /scratch" in text
        assert client.get(f"{API}/volumes/scratch").json()["used_bytes"] >= len("kept\n")
