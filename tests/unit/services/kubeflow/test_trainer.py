"""TrainJobs on Trainer's built-in runtimes or a (Cluster)TrainingRuntime of the same file:
the runtime's framework, nodes and trainer container, overridden by the TrainJob's trainer;
what Trainer does that gpupool does not (initializers, patches, elastic torch) refused."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.errors import ElasticNotSupported, KubeflowNotSupported, UnknownRuntime
from gpupool.services import kubeflow
from tests.support.kubeflow import (
    FakeLookups,
    container,
    image,
    pod,
    replicated,
    runtime,
    train_job,
)

PYTORCH = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
LOOKUPS = FakeLookups(
    images={
        PYTORCH: image(PYTORCH, "python3"),
        "rt:1": image("rt:1", "python", "default.py"),
        "mine:2": image("mine:2"),
        "pt:1": image("pt:1", "python", "x.py"),
        "ghcr.io/kubeflow/trainer/deepspeed-runtime": image("ds"),
    }
)


def translate(manifest: dict[str, Any], *defined: dict[str, Any]) -> kubeflow.Translated:
    runtimes = {}
    for document in defined:
        found = kubeflow.runtime_of(document)
        assert found is not None
        runtimes[(found.kind, found.name)] = found
    return kubeflow.translate(manifest, runtimes, LOOKUPS, False)


def job(manifest: dict[str, Any], *defined: dict[str, Any]) -> dict[str, Any]:
    translated = translate(manifest, *defined)
    assert translated.job is not None
    return translated.job.model_dump(mode="json", exclude_defaults=True)


TORCH = runtime(
    "torch-custom",
    {"numNodes": 2, "torch": {"numProcPerNode": "auto"}},
    [
        replicated(
            "node",
            pod(
                container(
                    image="rt:1", env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
                )
            ),
            trainer=True,
        )
    ],
)


def test_a_train_job_on_the_built_in_torch_runtime() -> None:
    trainer = {
        "numNodes": 2,
        "numProcPerNode": 4,
        "command": ["torchrun", "train.py"],
        "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}},
        "env": [{"name": "LR", "value": "0.1"}],
    }
    spec = job(
        train_job("torch-distributed", trainer=trainer, suspend=True, activeDeadlineSeconds=60)
    )
    assert spec["image"] == PYTORCH and spec["nodes"] == 2 and spec["launcher"] == "torch"
    assert spec["launcher_mode"] == "per-node" and spec["procs_per_node"] == 4
    assert spec["resources"] == {"gpus": 4.0} and spec["env"] == {"LR": "0.1"}
    assert spec["hold"] is True and spec["max_runtime_seconds"] == 60
    spec = job(train_job("torch-distributed", trainer={"command": ["python", "t.py"]}))
    assert spec.get("nodes", 1) == 1 and "launcher_mode" not in spec  # once a node


def test_a_runtime_of_the_file_gives_nodes_image_env_and_processes() -> None:
    spec = job(train_job("torch-custom", trainer={"env": [{"name": "B", "value": "3"}]}), TORCH)
    assert spec["image"] == "rt:1" and spec["command"] == ["python", "default.py"]  # its Cmd
    assert spec["nodes"] == 2 and spec["env"] == {"A": "1", "B": "3"}
    trainer = {"image": "mine:2", "command": ["torchrun", "x.py"], "numNodes": 3}
    spec = job(train_job("torch-custom", trainer=trainer), TORCH)
    assert spec["image"] == "mine:2" and spec["nodes"] == 3
    assert spec["launcher_mode"] == "per-node" and spec["procs_per_node"] == 1  # auto: CPUs
    namespaced = runtime("local", {"torch": {}}, [replicated("node", pod())], cluster=False)
    manifest = train_job("local")
    manifest["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    assert job(manifest, namespaced)["launcher"] == "torch"


def test_an_mpi_runtime_runs_the_launchers_command_and_drops_the_nodes() -> None:
    defined = runtime(
        "mpi-custom",
        {
            "numNodes": 2,
            "mpi": {"numProcPerNode": 2, "runLauncherAsNode": True, "sshAuthMountPath": "/s"},
        },
        [
            replicated(
                "launcher", pod(container(image="rt:1", command=["mpirun", "/pi"])), trainer=True
            ),
            replicated("node", pod(container(image="rt:1", command=["/usr/sbin/sshd"]))),
        ],
    )
    translated = translate(train_job("mpi-custom"), defined)
    assert translated.job is not None
    spec = translated.job.model_dump(mode="json", exclude_defaults=True)
    assert spec["launcher"] == "mpi" and spec["launcher_mode"] == "mpirun"
    assert spec["nodes"] == 2 and spec["procs_per_node"] == 2
    assert spec["command"] == ["mpirun", "/pi"]
    fields = [n.field for n in translated.notices]
    assert "ClusterTrainingRuntime mpi-custom: spec.mlPolicy.mpi.sshAuthMountPath" in fields
    trainer = {"command": ["mpirun", "-n", "2", "python", "train.py"]}
    spec = job(train_job("deepspeed-distributed", trainer=trainer))
    assert spec["launcher"] == "mpi" and spec["procs_per_node"] == 1


def test_a_plain_runtime_runs_the_command_with_no_launcher() -> None:
    plain = runtime("plain", {"numNodes": 2}, [replicated("node", pod(container(command=["x"])))])
    spec = job(train_job("plain"), plain)
    assert spec["nodes"] == 2 and "launcher" not in spec


@pytest.mark.parametrize(
    ("manifest", "error", "message"),
    [
        (train_job("nope"), UnknownRuntime, "no ClusterTrainingRuntime named nope"),
        (
            train_job("torch-distributed", initializer={"dataset": {}}),
            KubeflowNotSupported,
            "initializer",
        ),
        (train_job("torch-distributed", podSpecOverrides=[{}]), KubeflowNotSupported, "patch"),
    ],
)
def test_what_a_train_job_cannot_be(manifest: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        translate(manifest)


def test_what_a_runtime_cannot_be() -> None:
    elastic = runtime(
        "e", {"torch": {"elasticPolicy": {"maxNodes": 4}}}, [replicated("node", pod())]
    )
    with pytest.raises(ElasticNotSupported):
        kubeflow.runtime_of(elastic)
    jax = runtime("j", {"jax": {}}, [replicated("node", pod())])
    with pytest.raises(KubeflowNotSupported, match="not jax"):
        kubeflow.runtime_of(jax)


def test_a_runtime_document_makes_no_job_and_names_its_ignored_fields() -> None:
    defined = runtime(
        "gang",
        {"torch": {}},
        [
            replicated("dataset-initializer", pod()),
            replicated("node", pod(), trainer=True),
        ],
    )
    defined["spec"]["podGroupPolicy"] = {"volcano": {}}
    translated = translate(defined)
    assert translated.job is None and translated.kind == "ClusterTrainingRuntime"
    fields = {n.field: n.message for n in translated.notices}
    assert "gang" in fields["spec.podGroupPolicy"]
    assert "initializer" in fields["spec.template.spec.replicatedJobs.0"]
