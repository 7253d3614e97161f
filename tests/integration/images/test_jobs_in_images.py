"""Jobs in container images, in process, with real runners in real sandboxes: the image's
tree is the root (its own /etc/os-release, no host Python), its Env is under the job's env,
its Entrypoint comes before the command and its WorkingDir is where a job without a working
directory starts; the job still writes its outputs, and the image is recorded by digest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.images import ImageConfig, Registry, base_members, layer
from tests.support.platform import make_settings, refused, running_app, submit, wait_job

MARKER = 'NAME="gpupool image marker"\nID=marker\n'
CONFIG = ImageConfig(
    env=["PATH=/bin", "GREETING=from-image", "SHARED=image"],
    entrypoint=["/bin/sh", "-c"],
    workdir="/srv/app",
)
SCRIPT = (
    "cat /etc/os-release; echo greeting=$GREETING shared=$SHARED; echo pwd=$(pwd);"
    " test -e /usr/lib/python3 && echo host-python || echo no-host-python;"
    " echo uid=$(id -u); echo done > $GPUPOOL_OUTPUT_DIR/result.txt"
)


@pytest.fixture(scope="module")
def app(
    tmp_path_factory: pytest.TempPathFactory, image_registry: Registry
) -> Iterator[tuple[TestClient, Platform, str]]:
    data = tmp_path_factory.mktemp("image-jobs") / "data"
    settings = make_settings(data, image_registries=f"{image_registry.host}=insecure")
    ref = image_registry.push("jobs/marker", [layer(base_members(MARKER))], CONFIG)
    with running_app(settings) as (client, platform):
        pulled = client.post("/api/v1/images/pull", json={"ref": ref})
        assert pulled.status_code == 201, pulled.text
        yield client, platform, ref


def logs(client: TestClient, job_id: int) -> str:
    return client.get(f"/api/v1/jobs/{job_id}/logs").json()["text"]


def test_a_job_runs_in_the_images_tree_env_entrypoint_and_workdir(
    app: tuple[TestClient, Platform, str],
) -> None:
    client, platform, ref = app
    job = submit(client, [SCRIPT], image=ref, env={"SHARED": "job"})
    assert wait_job(client, job["id"])["status"] == "succeeded", logs(client, job["id"])
    text = logs(client, job["id"])
    assert MARKER in text  # the image's /etc, not the host's
    assert "greeting=from-image shared=job" in text  # the job's env over the image's
    assert "pwd=/srv/app" in text  # its WorkingDir (missing from the image: made empty)
    assert "no-host-python" in text
    assert "uid=" in text and "uid=0\n" not in text  # under its own account, still
    outputs = platform.settings.jobs_dir / str(job["id"]) / "outputs"
    assert (outputs / "result.txt").read_text() == "done\n"
    spec = client.get(f"/api/v1/jobs/{job['id']}").json()["spec"]
    assert spec["image"] == ref and spec["image_digest"].startswith("sha256:")


def test_the_image_is_found_by_its_digest_and_a_missing_program_fails_as_in_a_shell(
    app: tuple[TestClient, Platform, str],
) -> None:
    client, _, ref = app
    digest = client.get(f"/api/v1/images/{ref}").json()["digest"]
    job = submit(client, ["exec no-such-program"], image=digest)
    done = wait_job(client, job["id"])
    assert done["status"] == "failed" and done["exit_code"] == 127


def test_unknown_images_and_a_digest_given_by_hand_are_refused(
    app: tuple[TestClient, Platform, str],
) -> None:
    client, _, ref = app
    body = {"command": ["true"], "image": "nobody/holds:this"}
    refused(client.post("/api/v1/jobs", json=body), 404, "image_not_found")
    both = {"command": ["true"], "image": ref, "environment": "torch"}
    error = refused(client.post("/api/v1/jobs", json=both), 422, "invalid_request")
    assert "not both" in error["message"]
    forged = {"command": ["true"], "image_digest": "sha256:" + "0" * 64}
    refused(client.post("/api/v1/jobs", json=forged), 422, "invalid_request")


def test_a_launchers_one_process_runs_in_the_image_and_several_are_refused(
    app: tuple[TestClient, Platform, str],
) -> None:
    client, _, ref = app
    script = "echo rank=$RANK of $WORLD_SIZE at $MASTER_ADDR; cat /etc/os-release"
    job = submit(client, [script], image=ref, launcher="torch", resources={"gpus": 1})
    assert wait_job(client, job["id"])["status"] == "succeeded", logs(client, job["id"])
    text = logs(client, job["id"])
    assert "rank=0 of 1 at " in text and MARKER in text  # the plan's env, the image's tree

    several = submit(client, [script], image=ref, launcher="torch", resources={"gpus": 2})
    done = wait_job(client, several["id"])
    assert done["status"] == "failed"
    assert "cannot run in its image" in done["message"], done
    assert "run one process per node" in done["message"], done

    mpi = submit(client, [script], image=ref, launcher="mpi", resources={"gpus": 1})
    done = wait_job(client, mpi["id"])
    assert done["status"] == "failed" and "MPI job cannot run in an image" in done["message"]
