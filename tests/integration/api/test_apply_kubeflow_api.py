"""POST /api/v1/apply with Kubeflow manifests, in-process, on SQLite and PostgreSQL: the
real manifests of the operators' own examples (../shared/data/manifests: each translated, or
refused, as SOURCES.md there says; Katib's Experiments are not this translator's), and the
mapping of each field a manifest may hold onto the job it runs as: images, commands,
volumes, /dev/shm, priority classes, run policy; the notices of what is not honoured,
recorded as the job's event; text that cannot be stored refused wherever it is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpupool.cli.jobfiles import load_documents
from gpupool.platform import Platform
from gpupool.store.models import ImageModel, TeamModel
from tests.support.platform import make_settings, refused, running_app

APPLY = "/api/v1/apply"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Platform]]:
    settings = make_settings(
        tmp_path / "data", database_url, priority_classes={"high": 50, "low": -10}
    )
    with running_app(settings) as (client, platform):
        yield client, platform


@pytest.fixture
def client(app: tuple[TestClient, Platform]) -> TestClient:
    return app[0]


def manifest_file(shared: Path, name: str) -> list[dict[str, Any]]:
    path = shared / "data" / "manifests" / name
    return [doc.data for doc in load_documents(path.read_text(), name)]


def dry_run(client: TestClient, documents: list[dict], **options: Any) -> dict:
    answer = client.post(APPLY, json={"documents": documents, "dry_run": True, **options})
    assert answer.status_code == 200, answer.text
    return answer.json()


def spec_of(answer: dict, index: int = 0) -> dict:
    document = answer["documents"][index]
    assert document["kind"] == "Job" and document["document"]["kind"] == "Job"
    return document["document"]["spec"]


def fields(answer: dict, index: int = 0) -> list[str]:
    return [notice["field"] for notice in answer["documents"][index]["notices"]]


def pytorch_job(container: dict, pod: dict | None = None, **spec: Any) -> dict:
    """A PyTorchJob of one Master whose pod is ``pod`` with ``container``."""
    template = {"spec": {"containers": [{"name": "pytorch", "image": "pt:1"} | container]}}
    template["spec"] |= pod or {}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}} | spec,
    }


# -- the real manifests -----------------------------------------------------------------------


def test_a_pytorch_job_of_master_and_worker_runs_as_two_torch_nodes(
    client: TestClient, shared_dir: Path
) -> None:
    documents = manifest_file(shared_dir, "trainer/examples__pytorch__simple.yaml")
    answer = dry_run(client, documents, ignore_image=True)
    made = answer["documents"][0]
    assert made["translated_from"] == "kubeflow.org/v1 PyTorchJob"
    assert made["name"] == "pytorch-simple" and made["id"] is None
    spec = spec_of(answer)
    assert spec["nodes"] == 2 and spec["launcher"] == "torch"
    assert "launcher_mode" not in spec and "procs_per_node" not in spec  # one rank a node
    assert spec["command"] == ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
    assert "gpus" not in spec.get("resources", {}) and "image" not in spec
    assert "metadata.namespace" in fields(answer)
    assert any(f.endswith("imagePullPolicy") for f in fields(answer))
    refused_ = client.post(APPLY, json={"documents": documents, "dry_run": True})
    error = refused(refused_, 422, "image_not_available")
    assert "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727" in error["message"]
    assert error["message"].startswith("document 1 (PyTorchJob pytorch-simple): ")
    assert error["details"]["fields"][0]["field"] == (
        "documents.0.spec.pytorchReplicaSpecs.Master.template.spec.containers.0.image"
    )


def test_nproc_per_node_as_a_string_runs_torchrun_per_node(
    client: TestClient, shared_dir: Path
) -> None:
    documents = manifest_file(shared_dir, "trainer/examples__pytorch__cpu-demo__demo.yaml")
    spec = spec_of(dry_run(client, documents, ignore_image=True))
    assert spec["command"] == ["torchrun", "demo.py"]
    assert spec["nodes"] == 2 and spec["launcher"] == "torch"
    assert spec["launcher_mode"] == "per-node" and spec["procs_per_node"] == 2


def test_an_elastic_pytorch_job_is_refused(client: TestClient, shared_dir: Path) -> None:
    documents = manifest_file(shared_dir, "trainer/examples__pytorch__elastic__echo__echo.yaml")
    body = {"documents": documents, "dry_run": True, "ignore_image": True}
    error = refused(client.post(APPLY, json=body), 422, "elastic_not_supported")
    assert error["details"]["fields"][0]["field"] == "documents.0.spec.elasticPolicy"


def test_a_tf_job_with_parameter_servers_is_refused(client: TestClient, shared_dir: Path) -> None:
    name = "trainer/examples__tensorflow__dist-mnist__tf_job_mnist.yaml"
    body = {"documents": manifest_file(shared_dir, name), "dry_run": True, "ignore_image": True}
    error = refused(client.post(APPLY, json=body), 422, "tf_ps_not_supported")
    assert "MultiWorkerMirroredStrategy" in error["message"]


def test_a_tf_job_of_two_workers_runs_tensorflow_without_a_chief(
    client: TestClient, shared_dir: Path
) -> None:
    documents = manifest_file(shared_dir, "trainer/examples__tensorflow__simple.yaml")
    spec = spec_of(dry_run(client, documents, ignore_image=True))
    assert spec["nodes"] == 2 and spec["launcher"] == "tensorflow"
    assert "launcher_mode" not in spec
    assert spec["command"] == ["python", "/var/tf_mnist/mnist_with_summaries.py"]


def test_an_mpi_job_runs_its_launchers_mpirun_over_the_workers(
    client: TestClient, shared_dir: Path
) -> None:
    documents = manifest_file(shared_dir, "mpi-operator/examples__v2beta1__pi__pi.yaml")
    answer = dry_run(client, documents, ignore_image=True)
    spec = spec_of(answer)
    assert spec["nodes"] == 2 and spec["launcher"] == "mpi"
    assert spec["launcher_mode"] == "mpirun" and spec["procs_per_node"] == 1
    assert spec["command"] == ["mpirun", "-n", "2", "/home/mpiuser/pi"]
    assert spec["resources"]["memory_bytes"] == 1024**3
    noticed = fields(answer)
    for field in (
        "spec.runPolicy.cleanPodPolicy",
        "spec.runPolicy.ttlSecondsAfterFinished",
        "spec.sshAuthMountPath",
        "spec.mpiReplicaSpecs.Worker.template.spec.containers.0.command",
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers.0.securityContext",
    ):
        assert field in noticed


def test_a_runtime_alone_is_read_and_makes_nothing(client: TestClient, shared_dir: Path) -> None:
    name = "trainer/manifests__base__runtimes__torch_distributed.yaml"
    documents = manifest_file(shared_dir, name)
    answer = client.post(APPLY, json={"documents": documents})
    assert answer.status_code == 200, answer.text
    made = answer.json()["documents"][0]
    assert made["kind"] == "ClusterTrainingRuntime" and made["name"] == "torch-distributed"
    assert made["id"] is None and made["job_ids"] == []
    assert made["document"]["kind"] == "ClusterTrainingRuntime"
    assert client.get("/api/v1/jobs").json() == []


def test_a_train_job_on_the_built_in_torch_runtime(client: TestClient, shared_dir: Path) -> None:
    documents = manifest_file(shared_dir, "trainer/examples__yaml__01-multi-node.yaml")
    answer = dry_run(client, documents, ignore_image=True)
    spec = spec_of(answer)
    assert spec["nodes"] == 3 and spec["launcher"] == "torch"
    assert spec["launcher_mode"] == "per-node" and spec["procs_per_node"] == 1  # auto: 1 CPU
    assert spec["command"][:4] == ["torchrun", "--no-python", "python3", "-c"]
    assert "gpus" not in spec.get("resources", {})
    body = {"documents": documents, "dry_run": True}
    error = refused(client.post(APPLY, json=body), 422, "image_not_available")
    assert "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime" in error["message"]  # the runtime's


def test_a_train_job_on_a_runtime_of_its_file(client: TestClient, shared_dir: Path) -> None:
    documents = manifest_file(shared_dir, "trainer/examples__yaml__04-volcano-integration.yaml")
    answer = dry_run(client, documents, ignore_image=True)
    runtime, job = answer["documents"]
    assert runtime["kind"] == "ClusterTrainingRuntime" and runtime["id"] is None
    spec = spec_of(answer, 1)
    assert spec["nodes"] == 4 and spec["launcher"] == "torch"
    assert spec["resources"] == {"cpus": 2.0, "memory_bytes": 4 * 1024**3}
    assert spec["command"][:2] == ["python3", "-c"] and "launcher_mode" not in spec
    gang = "ClusterTrainingRuntime torch-distributed-volcano: spec.podGroupPolicy"
    assert gang in fields(answer, 1)


def test_a_runtime_defined_twice_in_a_file_is_refused(client: TestClient, shared_dir: Path) -> None:
    name = "trainer/manifests__base__runtimes__torch_distributed.yaml"
    documents = manifest_file(shared_dir, name) * 2
    error = refused(client.post(APPLY, json={"documents": documents}), 422, "kubeflow_invalid")
    assert error["message"].startswith("document 2 (ClusterTrainingRuntime torch-distributed)")
    assert "twice" in error["message"]


# -- the mapping, field by field --------------------------------------------------------------


def add_image(platform: Platform, name: str, **config: Any) -> None:
    """A site image listed as ``name`` (no files: a dry run resolves it by name only)."""
    with platform.db.session() as session:
        admin = session.get(TeamModel, 1)
        assert admin is not None
        session.add(
            ImageModel(
                team_id=None,
                name=name,
                digest=DIGEST,
                source="pull",
                size_bytes=1,
                config=config,
                created_at=0.0,
                created_by=1,
            )
        )


def test_a_command_left_to_a_gpupool_image_is_its_cmd(app: tuple[TestClient, Platform]) -> None:
    client, platform = app
    add_image(platform, "pt:1", Entrypoint=["/entry.sh"], Cmd=["python", "train.py"])
    answer = dry_run(client, [pytorch_job({})])
    spec = spec_of(answer)
    assert spec["image"] == "pt:1" and spec["command"] == ["python", "train.py"]
    spec = spec_of(dry_run(client, [pytorch_job({"args": ["eval.py"]})]))
    assert spec["command"] == ["eval.py"]  # args in Cmd's place, after the Entrypoint
    answer = dry_run(client, [pytorch_job({"command": ["python"], "args": ["x.py"]})])
    assert spec_of(answer)["command"] == ["python", "x.py"]
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers.0.command" in fields(answer)
    answer = dry_run(client, [pytorch_job({})], ignore_image=True)  # its Entrypoint, then Cmd
    assert spec_of(answer)["command"] == ["/entry.sh", "python", "train.py"]


def test_a_command_left_to_an_unknown_image_is_refused(client: TestClient) -> None:
    body = {"documents": [pytorch_job({})], "dry_run": True, "ignore_image": True}
    error = refused(client.post(APPLY, json=body), 422, "kubeflow_command_missing")
    assert error["details"]["fields"][0]["field"].endswith("containers.0.command")


def test_resources_env_and_run_policy_map_onto_the_job(client: TestClient) -> None:
    container = {
        "command": ["python", "train.py", "--lr=$(LR)"],
        "env": [
            {"name": "LR", "value": "0.1"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
        ],
        "workingDir": "/srv/work",
        "resources": {
            "limits": {"nvidia.com/gpu": 2, "cpu": "500m", "memory": "4Gi"},
            "requests": {"cpu": "250m", "ephemeral-storage": "10Gi"},
        },
    }
    pod = {"priorityClassName": "high", "terminationGracePeriodSeconds": 60}
    run = {"activeDeadlineSeconds": 3600, "backoffLimit": 3, "suspend": True}
    answer = dry_run(client, [pytorch_job(container, pod, runPolicy=run)], ignore_image=True)
    spec = spec_of(answer)
    assert spec["command"] == ["python", "train.py", "--lr=0.1"]
    assert spec["env"] == {"LR": "0.1"} and spec["workdir"] == "/srv/work"
    assert spec["resources"] == {"gpus": 2.0, "cpus": 0.5, "memory_bytes": 4 * 1024**3}
    assert spec["priority"] == 50 and spec["grace_period_seconds"] == 60
    assert spec["max_runtime_seconds"] == 3600 and spec["retries"] == 3 and spec["hold"] is True
    assert spec["procs_per_node"] == 1  # the operator runs the command once per node
    noticed = fields(answer)
    env = "spec.pytorchReplicaSpecs.Master.template.spec.containers.0.env"
    assert f"{env}.1.valueFrom" in noticed and f"{env}.2.name" in noticed
    assert any(f.endswith("requests.ephemeral-storage") for f in noticed)


def test_an_unknown_priority_class_is_refused(client: TestClient) -> None:
    documents = [pytorch_job({"command": ["true"]}, {"priorityClassName": "urgent"})]
    body = {"documents": documents, "dry_run": True, "ignore_image": True}
    error = refused(client.post(APPLY, json=body), 422, "unknown_priority_class")
    assert "high, low" in error["message"]


def test_claims_mount_volumes_and_datasets_and_shm_is_sized(client: TestClient) -> None:
    created = client.post("/api/v1/volumes", json={"name": "scratch"})
    assert created.status_code == 201, created.text
    pod = {
        "volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "scratch"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "made-here", "readOnly": True}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
            {"name": "tmp", "emptyDir": {}},
        ]
    }
    mounts = [
        {"name": "a", "mountPath": "/scratch"},
        {"name": "b", "mountPath": "/data"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volume = {"apiVersion": "gpupool/v1", "kind": "Volume", "metadata": {"name": "made-here"}}
    job = pytorch_job({"command": ["true"], "volumeMounts": mounts}, pod)
    spec = spec_of(dry_run(client, [volume, job], ignore_image=True), 1)
    assert spec["volumes"] == [
        {"name": "scratch", "mount": "/scratch"},
        {"name": "made-here", "mount": "/data"},
    ]
    assert spec["shm_bytes"] == 2 * 1024**3
    body = {"documents": [job], "dry_run": True, "ignore_image": True}
    error = refused(client.post(APPLY, json=body), 422, "claim_not_found")
    assert "made-here" in error["message"]


def test_volumes_gpupool_has_no_equivalent_of_are_refused(client: TestClient) -> None:
    pod = {"volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]}
    mounts = [{"name": "cfg", "mountPath": "/etc/app"}]
    documents = [pytorch_job({"command": ["true"], "volumeMounts": mounts}, pod)]
    body = {"documents": documents, "dry_run": True, "ignore_image": True}
    error = refused(client.post(APPLY, json=body), 422, "kubeflow_not_supported")
    assert "configMap" in error["message"]
    unmounted = pytorch_job({"command": ["true"]}, pod)  # nothing reads it: a notice
    answer = dry_run(client, [unmounted], ignore_image=True)
    assert "spec.pytorchReplicaSpecs.Master.template.spec.volumes.0" in fields(answer)


def test_what_is_no_manifest_gpupool_reads_is_a_clear_4xx(client: TestClient) -> None:
    xgboost = {"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "spec": {}}
    refused(client.post(APPLY, json={"documents": [xgboost]}), 422, "kubeflow_not_supported")
    batch = {"apiVersion": "batch/v1", "kind": "Job", "spec": {}}
    error = refused(client.post(APPLY, json={"documents": [batch]}), 422, "invalid_request")
    assert "kubeflow.org/v1" in str(error)
    extra = {"apiVersion": "gpupool/v1", "kind": "Job", "metadata": {"namespace": "x"}}
    error = refused(client.post(APPLY, json={"documents": [extra]}), 422, "invalid_request")
    assert "metadata.namespace" in error["message"]
    broken = pytorch_job({"command": "python train.py"})  # a string, not a list
    error = refused(client.post(APPLY, json={"documents": [broken]}), 422, "kubeflow_invalid")
    assert "containers.0.command: give a list of strings" in error["message"]


def test_a_submitted_manifest_records_its_notices_as_an_event(client: TestClient) -> None:
    job = pytorch_job({"command": ["sleep", "60"], "imagePullPolicy": "Always"})
    job["metadata"]["namespace"] = "research"
    answer = client.post(APPLY, json={"documents": [job], "ignore_image": True})
    assert answer.status_code == 200, answer.text
    job_id = answer.json()["documents"][0]["id"]
    events = client.get(f"/api/v1/jobs/{job_id}").json()["events"]
    ignored = [e for e in events if e["reason"] == "KubeflowFieldIgnored"]
    assert len(ignored) == 1
    assert "metadata.namespace" in ignored[0]["message"]
    assert "imagePullPolicy" in ignored[0]["message"]
    client.post(f"/api/v1/jobs/{job_id}/cancel")


@pytest.mark.parametrize("bad", ["\u0000", "\ud800"])
def test_text_that_cannot_be_stored_is_refused_wherever_it_is(client: TestClient, bad: str) -> None:
    for where in ("label", "namespace", "arg"):
        job = pytorch_job({"command": ["true"], "args": ["a" + bad] if where == "arg" else []})
        if where == "label":
            job["metadata"]["labels"] = {"x" + bad: "y"}
        if where == "namespace":
            job["metadata"]["namespace"] = "ns" + bad
        body = json.dumps({"documents": [job], "ignore_image": True})
        answer = client.post(APPLY, content=body, headers={"content-type": "application/json"})
        error = refused(answer, 422, "kubeflow_invalid")
        assert f"\\u{ord(bad):04x}" in error["message"]
    assert client.get("/api/v1/jobs").json() == []
