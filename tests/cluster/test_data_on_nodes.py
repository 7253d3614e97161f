"""Datasets, volumes and container images on a pool's joined nodes: each node materialises a
dataset version in its own cache and unpacks an image in its own image cache, once, from the
server's stores (a shared file system on a real pool; the same directory on 127.0.0.1); a
volume is one directory whichever node a job lands on, for single jobs and a gang's tasks
alike; a node's DatasetFetching progress reaches ``why``; another team's job on a node can
neither name them nor reach their files."""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli, refused, wait_for, wait_status
from tests.support.images import ImageConfig, Layout, base_members, layer, missing_tools
from tests.support.pool import Pool

ENDED = {"succeeded", "failed", "lost"}
SECRET = "pooled inputs 7f3a\n"
MARKER = 'NAME="pooled image"\nID=pooled-image\n'
IMAGE = "pooled/busybox:1"
READ = 'cat "$GPUPOOL_DATASET_POOLED_DATA/in.txt"; cat /etc/os-release'


@dataclass
class Data:
    """What the module's jobs use: a dataset version (its manifest's hex), the server's
    volumes store (where the volume's directory is) and an image (its digest's hex)."""

    manifest: str
    volumes: Path
    image: str

    def volume(self, job: dict) -> Path:
        """The directory of the volume ``job`` mounts, by the id its spec recorded."""
        return self.volumes / str(job["spec"]["volumes"][0]["id"])


def node_dir(pool: Pool, node: str) -> Path:
    """A node's data directory: a joined node's own, or the server machine's node's."""
    if node in pool.nodes:
        return pool.nodes[node].data_dir
    return pool.server.data_dir / "cluster" / "node"


@pytest.fixture(scope="module")
def data(pool: Pool, tmp_path_factory: pytest.TempPathFactory) -> Data:
    why = missing_tools()
    if why is not None:
        pytest.skip(why)
    cli = Cli(pool.server.url, pool.server.token)
    root = tmp_path_factory.mktemp("pooled-data")
    (root / "inputs").mkdir()
    (root / "inputs" / "in.txt").write_text(SECRET)
    cli.ok("dataset", "create", "pooled-data", "--from", str(root / "inputs"))
    version = cli.json("dataset", "show", "pooled-data:1")
    cli.ok("volume", "create", "pooled-vol")
    layout = Layout(root / "layout")
    layout.add("busybox:1", [layer(base_members(MARKER))], ImageConfig())
    archive = layout.oci_archive("busybox:1", root / "busybox.tar")
    # imported (no registry holds it), for the admin's own team: not a site image
    image = cli.json("image", "import", str(archive), "--name", IMAGE, "--team", "default")
    return Data(
        manifest=version["manifest"].removeprefix("sha256:"),
        volumes=pool.server.data_dir / "volumes",
        image=image["digest"].removeprefix("sha256:"),
    )


def run_on(cli: Cli, gpu_type: str, script: str) -> dict:
    uses = ["--dataset", "pooled-data", "--volume", "pooled-vol:/vol", "--image", IMAGE]
    job_id = cli.submit("--gpus", "1", "--gpu-type", gpu_type, *uses, "--", "sh", "-c", script)
    try:
        job = wait_status(cli, job_id, ENDED, timeout=180)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}\n{cli.ok('show', str(job_id))}") from None
    assert job["status"] == "succeeded", (job["message"], cli.ok("logs", str(job_id)))
    return job


def test_jobs_on_two_nodes_read_the_dataset_share_the_volume_and_run_in_the_image(
    pool: Pool, pool_cli: Cli, data: Data
) -> None:
    first = run_on(pool_cli, "H100", f"{READ}; echo written on n1 > /vol/note.txt")
    second = run_on(pool_cli, "L40S", f"{READ}; cat /vol/note.txt")

    assert (first["placement"]["node"], second["placement"]["node"]) == ("n1", "n2")
    for job in (first, second):
        log = pool_cli.ok("logs", str(job["id"]))
        assert SECRET in log and "ID=pooled-image" in log, log
    assert "written on n1" in pool_cli.ok("logs", str(second["id"]))  # n1's write, seen on n2
    assert (data.volume(first) / "note.txt").read_text() == "written on n1\n"
    for node in ("n1", "n2"):
        held = node_dir(pool, node)
        assert (held / "dataset-cache" / data.manifest / "in.txt").read_text() == SECRET
        assert (held / "images" / "roots" / data.image / "rootfs" / "bin" / "busybox").is_file()
        assert not (held / "volumes").exists()  # the volume is the server's, not a node's copy
    used = pool_cli.json("volume", "show", "pooled-vol")["used_bytes"]
    assert used >= len("written on n1\n")  # counted where the server measures the team's quota


def test_a_gang_over_two_nodes_reads_the_dataset_and_writes_the_one_volume(
    pool: Pool, pool_cli: Cli, data: Data
) -> None:
    script = (
        'echo "read $(cat $GPUPOOL_DATASET_POOLED_DATA/in.txt) on $GPUPOOL_NODE"; '
        "echo $GPUPOOL_NODE > /vol/gang-$GPUPOOL_TASK_INDEX"
    )
    body = {
        "command": ["sh", "-c", script],
        "nodes": 2,
        "resources": {"gpus": 2},
        "datasets": ["pooled-data"],
        "volumes": ["pooled-vol:/vol"],
        "image": IMAGE,
    }
    headers = {"Authorization": f"Bearer {pool.server.token}"}
    answer = httpx.post(f"{pool.server.url}/api/v1/jobs", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    job = wait_status(pool_cli, job_id, ENDED, timeout=180)
    log = pool_cli.ok("logs", str(job_id))
    assert job["status"] == "succeeded", (job["message"], log)

    nodes = [(data.volume(job) / f"gang-{index}").read_text().strip() for index in (0, 1)]
    assert len(set(nodes)) == 2, nodes  # one task per node, both wrote the same volume
    for index, node in enumerate(nodes):
        assert f"[task {index}] read {SECRET.strip()} on {node}" in log, log
        held = node_dir(pool, node)
        assert (held / "dataset-cache" / data.manifest).is_dir()
        assert (held / "images" / "roots" / data.image / "image.json").is_file()


def test_a_nodes_dataset_fetching_progress_reaches_why(
    pool: Pool, pool_cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "slow.txt").write_text("slow to come\n")
    pool_cli.ok("dataset", "create", "pooled-slow", "--from", str(tmp_path / "slow.txt"))
    manifest = pool_cli.json("dataset", "show", "pooled-slow:1")["manifest"].split(":")[1]
    cache = pool.nodes["n1"].data_dir / "dataset-cache"
    cache.mkdir(parents=True, exist_ok=True)
    held = os.open(cache / f".{manifest}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # as another job of n1 materialising it holds it
    try:
        job_id = pool_cli.submit(
            "--gpus", "1", "--gpu-type", "H100", "--dataset", "pooled-slow", "--", "true"
        )

        def fetching() -> dict | None:
            job = pool_cli.job(job_id)
            return job if job["reason"] == "DatasetFetching" else None

        job = wait_for(fetching, timeout=120, what="the job's reason to be DatasetFetching")
        said = "materialising dataset pooled-slow:1 on this node: waiting for another job"
        assert job["status"] == "starting" and said in job["message"], job
        assert said in pool_cli.ok("why", str(job_id))
    finally:
        os.close(held)
    job = wait_status(pool_cli, job_id, ENDED, timeout=120)
    assert job["status"] == "succeeded", pool_cli.ok("logs", str(job_id))
    assert job["placement"]["node"] == "n1"
    assert (cache / manifest / "slow.txt").read_text() == "slow to come\n"


@pytest.fixture
def rival(pool: Pool) -> Iterator[Cli]:
    """A member of another team than the admin's (``default``)."""
    admin = httpx.Client(
        base_url=f"{pool.server.url}/api/v1",
        headers={"Authorization": f"Bearer {pool.server.token}"},
        timeout=30,
    )
    with admin:
        if "rivals" not in {team["name"] for team in admin.get("/teams").json()}:
            assert admin.post("/teams", json={"name": "rivals"}).status_code == 201
        name = f"rival-{secrets.token_hex(3)}"
        made = admin.post("/users", json={"name": name, "teams": ["rivals"]})
        assert made.status_code == 201, made.text
        token = admin.post("/tokens", json={"user": name, "name": "test"}).json()["token"]
    yield Cli(pool.server.url, token)


def test_another_teams_job_on_a_node_can_neither_mount_nor_reach_them(
    pool: Pool, pool_cli: Cli, data: Data, rival: Cli
) -> None:
    on_n1 = ["--gpus", "1", "--gpu-type", "H100"]
    run_on(pool_cli, "H100", READ)  # n1 holds the version and the image's tree
    assert refused(rival("run", *on_n1, "--dataset", "pooled-data", "--", "true"), "not_found")
    assert refused(rival("run", *on_n1, "--volume", "pooled-vol:/vol", "--", "true"), "not_found")
    assert refused(rival("run", *on_n1, "--image", IMAGE, "--", "true"), "image_not_found")
    digest = f"sha256:{data.image}"
    assert refused(rival("run", *on_n1, "--image", digest, "--", "true"), "image_not_found")

    n1 = pool.nodes["n1"].data_dir
    paths = [
        n1 / "dataset-cache" / data.manifest / "in.txt",
        n1 / "images" / "roots" / data.image / "rootfs" / "etc" / "os-release",
        data.volumes,
        pool.server.data_dir / "datasets" / "blobs",
    ]
    script = "; ".join(f"cat {p} || ls {p} || echo no {p}" for p in paths)
    job_id = rival.submit(*on_n1, "--", "sh", "-c", script)
    job = wait_status(rival, job_id, ENDED, timeout=180)
    log = rival.ok("logs", str(job_id))
    assert job["placement"]["node"] == "n1", job
    assert SECRET.strip() not in log and "pooled-image" not in log, log
    assert all(f"no {p}" in log for p in paths), log
