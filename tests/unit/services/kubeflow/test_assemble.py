"""The job a manifest runs as: its image (a gpupool image, or none when asked), its command as
docker runs an image, its claims as volumes or datasets, its team and priority; a problem of
the job itself refused with the code its submit would give."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.errors import (
    ClaimNotFound,
    ImageNotAvailable,
    InvalidLauncher,
    KubeflowCommandMissing,
    KubeflowInvalid,
)
from gpupool.services import kubeflow
from tests.support.kubeflow import FakeLookups, container, image, pod, pytorch_job, replica

C = "spec.pytorchReplicaSpecs.Master.template.spec.containers.0"


def one(main: dict[str, Any], **pod_spec: Any) -> dict[str, Any]:
    return pytorch_job({"Master": replica(1, pod(main, **pod_spec))})


def translate(manifest: dict[str, Any], lookups: FakeLookups, ignore: bool = False) -> Any:
    translated = kubeflow.translate(manifest, {}, lookups, ignore)
    assert translated.job is not None
    notices = {n.field: n.message for n in translated.notices}
    return translated.job.model_dump(mode="json", exclude_defaults=True), notices


ENTRY = FakeLookups(
    images={"pt:1": image("pt:1", "train.py", entrypoint=("python",), workdir="/app")}
)


@pytest.mark.parametrize(
    ("fields", "ignore", "command"),
    [
        ({}, False, ["train.py"]),  # Cmd, after the Entrypoint gpupool runs
        ({"args": ["eval.py"]}, False, ["eval.py"]),
        ({"command": ["bash"], "args": ["-c", "x"]}, False, ["bash", "-c", "x"]),
        ({}, True, ["python", "train.py"]),  # on the node: Entrypoint and Cmd
        ({"args": ["eval.py"]}, True, ["python", "eval.py"]),
    ],
)
def test_the_command_is_what_docker_would_run(
    fields: dict, ignore: bool, command: list[str]
) -> None:
    spec, notices = translate(one(container(**fields)), ENTRY, ignore)
    assert spec["command"] == command
    assert ("image" in spec) is not ignore
    if "command" in fields and not ignore:
        assert "Entrypoint (python) runs before" in notices[f"{C}.command"]
    if ignore:
        assert "nodes' own system" in notices[f"{C}.image"]


def test_a_command_no_image_gives_is_refused() -> None:
    with pytest.raises(KubeflowCommandMissing, match=f"{C}.command"):
        kubeflow.translate(one(container()), {}, FakeLookups(), True)
    empty = FakeLookups(images={"pt:1": image("pt:1", entrypoint=("python",))})
    with pytest.raises(KubeflowCommandMissing, match="gives no Cmd"):
        kubeflow.translate(one(container()), {}, empty, False)


def test_an_image_gpupool_has_not_is_refused_unless_ignored() -> None:
    with pytest.raises(ImageNotAvailable, match="pt:1 is not a gpupool image") as raised:
        kubeflow.translate(one(container(command=["x"])), {}, FakeLookups(), False)
    assert raised.value.details["fields"][0]["field"] == f"{C}.image"
    spec, _ = translate(one(container(command=["x"])), FakeLookups(), True)
    assert "image" not in spec
    with pytest.raises(KubeflowInvalid, match="the container's image"):
        kubeflow.translate(one({"name": "x", "command": ["x"]}), {}, FakeLookups(), False)


def test_a_working_dir_is_the_images_or_the_nodes() -> None:
    main = container(command=["x"], workingDir="/elsewhere")
    spec, notices = translate(one(main), ENTRY)
    assert "workdir" not in spec and "WorkingDir (/app)" in notices[f"{C}.workingDir"]
    spec, notices = translate(one(container(command=["x"], workingDir="/app/")), ENTRY)
    assert "workdir" not in spec and f"{C}.workingDir" not in notices
    spec, _ = translate(one(main), ENTRY, ignore=True)
    assert spec["workdir"] == "/elsewhere"


def test_claims_are_the_teams_volumes_else_its_datasets() -> None:
    volumes = [
        {"name": "a", "persistentVolumeClaim": {"claimName": "scratch", "readOnly": True}},
        {"name": "b", "persistentVolumeClaim": {"claimName": "imagenet"}},
    ]
    mounts = [{"name": "a", "mountPath": "/scratch"}, {"name": "b", "mountPath": "/data"}]
    lookups = FakeLookups(volumes={"scratch"}, datasets={"imagenet"})
    spec, notices = translate(
        one(container(command=["x"], volumeMounts=mounts), volumes=volumes), lookups, True
    )
    assert spec["volumes"] == [{"name": "scratch", "mount": "/scratch"}]
    assert spec["datasets"] == [{"name": "imagenet", "mount": "/data"}]
    claim = (
        "spec.pytorchReplicaSpecs.Master.template.spec.volumes.{}.persistentVolumeClaim.claimName"
    )
    assert "read-write" in notices[claim.format(0)] and "read-only" in notices[claim.format(1)]
    with pytest.raises(ClaimNotFound, match="no volume or dataset named imagenet"):
        translate(
            one(container(command=["x"], volumeMounts=mounts), volumes=volumes),
            FakeLookups(volumes={"scratch"}),
            True,
        )


def test_the_team_of_the_queue_label_is_the_one_looked_up_in() -> None:
    manifest = one(container(command=["x"]))
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "vision"}
    lookups = FakeLookups()
    spec, _ = translate(manifest, lookups, True)
    assert spec["team"] == "vision" and lookups.teams_asked == ["vision"]


def test_a_problem_of_the_job_keeps_its_submits_code() -> None:
    main = container(command=["python", "t.py"], resources={"limits": {"nvidia.com/gpu": 4}})
    with pytest.raises(InvalidLauncher, match="translates to: .*do not spread evenly"):
        kubeflow.translate(
            pytorch_job({"Master": replica(1, pod(main))}, nprocPerNode=3), {}, FakeLookups(), True
        )
    shm = one(
        container(
            command=["x"],
            resources={"limits": {"memory": "1Gi"}},
            volumeMounts=[{"name": "s", "mountPath": "/dev/shm"}],
        ),
        volumes=[{"name": "s", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}],
    )
    with pytest.raises(Exception, match="cannot be larger than the job's memory"):
        kubeflow.translate(shm, {}, FakeLookups(), True)


def test_runs_torchrun() -> None:
    assert kubeflow.runs_torchrun(["torchrun", "x.py"])
    assert kubeflow.runs_torchrun(["sh", "-c", "cd /app; torchrun --nproc-per-node=2 x.py"])
    assert not kubeflow.runs_torchrun(["python", "x.py"])
    assert not kubeflow.runs_torchrun(["python", "-m", "mypkg"])
    assert not kubeflow.runs_torchrun(["bash", "-c"])
    assert not kubeflow.runs_torchrun(["echo", "torchrun"])
    assert not kubeflow.runs_torchrun([])
