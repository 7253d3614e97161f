"""Container images from the real CLI against a real server and a real registry on
127.0.0.1: pull, import an archive, list, show and remove; refusals say what to do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Cli, refused
from tests.support.images import ImageConfig, Layout, Registry, base_members, layer
from tests.support.server import ServerProcess

CONFIG = ImageConfig(env=["PATH=/bin", "GREETING=hi"], entrypoint=["/bin/sh", "-c"], workdir="/srv")


@pytest.fixture(scope="module")
def pool(
    tmp_path_factory: pytest.TempPathFactory, image_registry: Registry
) -> Iterator[ServerProcess]:
    """A real server that allows pulls from the tests' registry."""
    env = {"GPUPOOL_IMAGE_REGISTRIES": f"{image_registry.host}=insecure"}
    process = ServerProcess(tmp_path_factory.mktemp("cli-images") / "data", env=env).start()
    yield process
    process.stop()


def test_pull_import_list_show_and_remove(
    admin: Cli, image_registry: Registry, tmp_path: Path
) -> None:
    ref = image_registry.push("cli/base", [layer(base_members())], CONFIG)
    said = admin.ok("image", "pull", ref)
    assert said.startswith(f"pulled {ref} for the site: sha256:")

    layout = Layout(tmp_path / "layout")
    layout.add("tool:1", [layer(base_members("tool\n"))], ImageConfig())
    archive = layout.docker_archive("tool:1", tmp_path / "tool.tar", "tool:1")
    imported = admin.json("image", "import", str(archive), "--name", "team/tool:1")
    assert imported["name"] == "team/tool:1" and imported["source"] == "import"

    listed = admin.json("image", "ls")
    assert sorted(i["name"] for i in listed) == sorted([ref, "team/tool:1"])
    table = admin.ok("image", "ls")
    assert "team/tool:1" in table and "(site)" in table
    shown = admin.ok("image", "show", ref)
    assert "GREETING=hi" in shown and "workdir: /srv" in shown and "/bin/sh -c" in shown

    assert admin.ok("image", "rm", "team/tool:1").startswith("removed team/tool:1")
    assert refused(admin("image", "show", "team/tool:1"), "not_found")
    assert refused(admin("image", "pull", "docker.io/library/ubuntu"), "registry_not_allowed")
    assert refused(admin("image", "pull", "Bad Name"), "invalid_image_name")
    assert refused(admin("image", "import", str(tmp_path / "missing.tar")), "unreadable_archive")


def test_run_in_an_image_follows_its_entrypoint_env_and_workdir(
    admin: Cli, image_registry: Registry
) -> None:
    ref = image_registry.push("cli/run", [layer(base_members("ID=cli-run\n"))], CONFIG)
    admin.ok("image", "pull", ref)
    # gpupool run -f: the job's log and its exit code, as a user follows it
    done = admin("run", "--image", ref, "-f", "--", "cat /etc/os-release; echo $GREETING; pwd")
    assert done.returncode == 0, done.stderr
    assert "ID=cli-run" in done.stdout and "hi" in done.stdout and "/srv" in done.stdout
    job_id = admin.submit("--image", ref, "--", "true")
    shown = admin.ok("show", str(job_id))
    assert f"image:      {ref} (sha256:" in shown
    assert refused(admin("run", "--image", "nothing/here", "--", "true"), "image_not_found")
