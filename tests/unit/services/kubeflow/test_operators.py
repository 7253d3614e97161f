"""PyTorchJob, TFJob and MPIJob as one gang job each: nodes from the replicas, which must run
the same container; launcher, mode and processes per node; the replica types and elastic
jobs gpupool refuses."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.errors import (
    ElasticNotSupported,
    KubeflowInvalid,
    KubeflowNotSupported,
    TfPsNotSupported,
)
from gpupool.services import kubeflow
from tests.support.kubeflow import (
    FakeLookups,
    container,
    image,
    mpi_job,
    pod,
    pytorch_job,
    replica,
    tf_job,
)

RUN = container(command=["python", "train.py"])


def translate(manifest: dict[str, Any], **lookups: Any) -> kubeflow.Translated:
    images = {"pt:1": image("pt:1", "python", "x.py"), "mpi:1": image("mpi:1")}
    return kubeflow.translate(manifest, {}, FakeLookups(**({"images": images} | lookups)), False)


def job(manifest: dict[str, Any]) -> dict[str, Any]:
    translated = translate(manifest)
    assert translated.job is not None
    return translated.job.model_dump(mode="json", exclude_defaults=True)


def notices(manifest: dict[str, Any]) -> dict[str, str]:
    return {n.field: n.message for n in translate(manifest).notices}


# -- PyTorchJob -------------------------------------------------------------------------------


def test_a_pytorch_job_runs_its_master_and_workers_as_torch_nodes() -> None:
    manifest = pytorch_job({"Master": replica(1, pod(RUN)), "Worker": replica(3, pod(RUN))})
    spec = job(manifest)
    assert spec["nodes"] == 4 and spec["launcher"] == "torch" and spec["name"] == "pt"
    assert spec["command"] == ["python", "train.py"] and spec["image"] == "pt:1"
    workers_only = pytorch_job({"Worker": replica(None, pod(RUN))})  # replicas: 1 by default
    assert job(workers_only).get("nodes", 1) == 1


@pytest.mark.parametrize(
    ("nproc", "gpus", "mode", "procs"),
    [
        (None, None, None, None),
        (None, 4, None, 1),  # the operator runs a command that is no torchrun once a node
        ("2", None, None, 2),
        (4, 4, None, 4),
        ("gpu", 2, None, 2),
        ("auto", 2, None, 2),
        ("auto", None, None, 3),  # the node's CPUs
        ("cpu", None, None, 3),
    ],
)
def test_processes_per_node(
    nproc: object, gpus: int | None, mode: str | None, procs: int | None
) -> None:
    limits = {"cpu": "2500m"} | ({"nvidia.com/gpu": gpus} if gpus else {})
    main = container(command=["python", "train.py"], resources={"limits": limits})
    extra = {} if nproc is None else {"nprocPerNode": nproc}
    spec = job(pytorch_job({"Master": replica(1, pod(main))}, **extra))
    assert spec.get("launcher_mode") == mode and spec.get("procs_per_node") == procs


@pytest.mark.parametrize(
    "command",
    [
        ["torchrun", "--nnodes=2", "train.py"],
        ["/usr/local/bin/torchrun", "train.py"],
        ["python3", "-m", "torch.distributed.run", "train.py"],
        ["python", "-m", "torch.distributed.launch", "train.py"],
        ["bash", "-c", "pip list && torchrun train.py"],
    ],
)
def test_a_command_that_runs_torchrun_itself_runs_once_per_node(command: list[str]) -> None:
    main = container(command=command)
    spec = job(pytorch_job({"Master": replica(1, pod(main))}, nprocPerNode="3"))
    assert spec["launcher_mode"] == "per-node" and spec["procs_per_node"] == 3
    assert spec["command"] == command


def test_replicas_must_run_the_same_container_and_get_the_largest_resources() -> None:
    small = container(command=["python", "t.py"], resources={"limits": {"cpu": 2, "memory": "1Gi"}})
    large = container(command=["python", "t.py"], resources={"limits": {"cpu": 8}})
    manifest = pytorch_job({"Master": replica(1, pod(small)), "Worker": replica(1, pod(large))})
    assert job(manifest)["resources"] == {"cpus": 8.0, "memory_bytes": 2**30}
    assert (
        "largest"
        in notices(manifest)["spec.pytorchReplicaSpecs.Master.template.spec.containers.0.resources"]
    )
    other = container(command=["python", "other.py"])
    differ = pytorch_job({"Master": replica(1, pod(small)), "Worker": replica(1, pod(other))})
    with pytest.raises(KubeflowNotSupported, match="differ in their container's command"):
        translate(differ)
    idle = pytorch_job({"Master": replica(1, pod(small)), "Worker": replica(0, pod(other))})
    assert job(idle).get("nodes", 1) == 1  # a replica of none runs nothing, and need not agree


@pytest.mark.parametrize(
    ("manifest", "error", "message"),
    [
        (pytorch_job(elasticPolicy={"minReplicas": 1}), ElasticNotSupported, "elasticPolicy"),
        (
            pytorch_job(runPolicy={"schedulingPolicy": {"minAvailable": 1}}),
            ElasticNotSupported,
            "minAvailable 1 is below the job's 2 nodes",
        ),
        (pytorch_job({"Master": replica(2)}), KubeflowInvalid, "a job has one Master"),
        (pytorch_job({"Chief": replica()}), KubeflowInvalid, "Master, Worker"),
        (pytorch_job({"Worker": replica(0)}), KubeflowInvalid, "at least one replica"),
        (pytorch_job({}), KubeflowInvalid, "the replicas"),
        (pytorch_job(nprocPerNode="many"), KubeflowInvalid, '"auto", "gpu" or "cpu"'),
        (pytorch_job({"Worker": {"replicas": 1}}), KubeflowInvalid, "pod template"),
    ],
)
def test_what_a_pytorch_job_cannot_be(manifest: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        translate(manifest)


# -- TFJob ------------------------------------------------------------------------------------


def test_a_tf_job_with_a_chief_runs_tensorflow_in_chief_mode() -> None:
    spec = job(tf_job({"Chief": replica(1, pod(RUN)), "Worker": replica(2, pod(RUN))}))
    assert spec["nodes"] == 3 and spec["launcher"] == "tensorflow"
    assert spec["launcher_mode"] == "chief"
    spec = job(tf_job({"Worker": replica(2, pod(RUN))}, successPolicy="AllWorkers"))
    assert spec["nodes"] == 2 and "launcher_mode" not in spec
    named = notices(tf_job({"Worker": replica(2, pod(RUN)), "PS": replica(0, pod(RUN))}))
    assert "spec.successPolicy" not in named and "0 replicas" in named["spec.tfReplicaSpecs.PS"]


@pytest.mark.parametrize(
    ("replicas", "error", "message"),
    [
        ({"Chief": replica(), "PS": replica(2), "Worker": replica()}, TfPsNotSupported, "PS"),
        ({"Evaluator": replica(), "Worker": replica()}, KubeflowNotSupported, "Evaluator"),
        ({"Chief": replica(), "Master": replica()}, KubeflowInvalid, "not both"),
        ({"Chief": replica(2)}, KubeflowInvalid, "one Chief"),
    ],
)
def test_what_a_tf_job_cannot_be(replicas: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        translate(tf_job(replicas))


# -- MPIJob -----------------------------------------------------------------------------------

LAUNCH = container(command=["mpirun"], args=["-n", "4", "/opt/pi"], image="mpi:1")
SSHD = container(command=["/usr/sbin/sshd"], args=["-De"], image="mpi:1")


def mpi(launcher: dict = LAUNCH, workers: int = 2, **spec: Any) -> dict[str, Any]:
    return mpi_job(
        {"Launcher": replica(1, pod(launcher)), "Worker": replica(workers, pod(SSHD))}, **spec
    )


def test_an_mpi_job_runs_the_launchers_mpirun_over_its_workers() -> None:
    spec = job(mpi(slotsPerWorker=2))
    assert spec["nodes"] == 2 and spec["launcher"] == "mpi"
    assert spec["launcher_mode"] == "mpirun" and spec["procs_per_node"] == 2
    assert spec["command"] == ["mpirun", "-n", "4", "/opt/pi"]
    assert job(mpi(runLauncherAsWorker=True))["nodes"] == 3
    dropped = notices(mpi())["spec.mpiReplicaSpecs.Worker.template.spec.containers.0.command"]
    assert "not run" in dropped


def test_a_launcher_command_that_is_not_mpirun_runs_under_gpupools_mpirun() -> None:
    manifest = mpi(container(command=["python", "hvd.py"], image="mpi:1"))
    spec = job(manifest)
    assert "launcher_mode" not in spec and spec["procs_per_node"] == 1
    assert (
        "once per slot"
        in notices(manifest)["spec.mpiReplicaSpecs.Launcher.template.spec.containers.0.command"]
    )


def test_the_ranks_run_in_the_workers_image() -> None:
    manifest = mpi(container(command=["mpirun", "x"], image="launcher:1"))
    translated = kubeflow.translate(
        manifest,
        {},
        FakeLookups(images={"mpi:1": image("mpi:1"), "launcher:1": image("l:1")}),
        False,
    )
    assert translated.job is not None and translated.job.image == "mpi:1"


@pytest.mark.parametrize(
    ("manifest", "error", "message"),
    [
        (mpi(mpiImplementation="Intel"), KubeflowNotSupported, "Open MPI's, not Intel"),
        (mpi(workers=0), KubeflowInvalid, "Worker replicas"),
        (mpi_job({"Worker": replica(2, pod(SSHD))}), KubeflowInvalid, "one Launcher"),
    ],
)
def test_what_an_mpi_job_cannot_be(manifest: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        translate(manifest)
