"""A replica's pod template as what it asks of its node: the one container's image, command,
args, env and resources; its volumes as claims, /dev/shm and /tmp; what only Kubernetes reads
named as ignored; what the job could not run without refused."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.errors import KubeflowInvalid, KubeflowNotSupported
from gpupool.services.kubeflow._fields import Fields
from gpupool.services.kubeflow._pods import Container, Mount, Resources, read_pod
from tests.support.kubeflow import container, pod


def read(template: dict[str, Any]) -> tuple[Container, dict[str, str]]:
    """The container, and the notices given, by field."""
    fields = Fields({"template": template})
    at = fields.root().map("template")
    assert at is not None
    read_ = read_pod(at)
    return read_, {n.field: n.message for n in fields.all_notices()}


C = "template.spec.containers.0"


def test_the_container_is_read_with_env_expanded_as_kubernetes_does() -> None:
    main = container(
        command=["python", "train.py"],
        args=["--lr=$(LR)", "--path=$(HOME_DIR)/x", "$$(LR)", "$(UNSET)"],
        env=[
            {"name": "LR", "value": "0.1"},
            {"name": "HOME_DIR", "value": "/home/$(LR)"},
            {"name": "N", "value": 4},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "GPUPOOL_TOKEN", "value": "x"},
        ],
        workingDir="/work",
    )
    read_, notices = read(pod(main, terminationGracePeriodSeconds=30, priorityClassName="high"))
    assert read_.image == "pt:1" and read_.image_field == f"{C}.image"
    assert read_.command == ("python", "train.py")
    assert read_.args == ("--lr=0.1", "--path=/home/0.1/x", "$(LR)", "$(UNSET)")
    assert dict(read_.env) == {"LR": "0.1", "HOME_DIR": "/home/0.1", "N": "4"}
    assert read_.workdir == "/work" and read_.grace_seconds == 30.0
    assert read_.priority_class == "high"
    assert "unset" in notices[f"{C}.env.3.valueFrom"]
    assert "set by gpupool" in notices[f"{C}.env.4.name"]


def test_resources_come_from_limits_else_requests() -> None:
    limits = {"nvidia.com/gpu": "2", "cpu": "1500m", "memory": "8Gi", "example.com/fpga": 1}
    requests = {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"}
    read_, notices = read(pod(container(resources={"limits": limits, "requests": requests})))
    assert read_.resources == Resources(gpus=2, cpus=1.5, memory=8 * 2**30)
    assert "the limit of cpu" in notices[f"{C}.resources.requests.cpu"]
    assert f"{C}.resources.limits.example.com/fpga" in notices
    assert f"{C}.resources.requests.ephemeral-storage" in notices
    read_, _ = read(pod(container(resources={"requests": {"cpu": "250m", "memory": "1G"}})))
    assert read_.resources == Resources(cpus=0.25, memory=10**9)
    read_, _ = read(pod(container()))
    assert read_.resources == Resources()


@pytest.mark.parametrize(
    ("limits", "error", "message"),
    [
        ({"amd.com/gpu": 1}, KubeflowNotSupported, "gives NVIDIA GPUs"),
        ({"nvidia.com/gpu": "0.5"}, KubeflowInvalid, "whole number"),
        ({"cpu": "0"}, KubeflowInvalid, "more than 0 CPUs"),
        ({"memory": "lots"}, KubeflowInvalid, "quantity"),
    ],
)
def test_resources_gpupool_cannot_give_are_refused(
    limits: dict, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        read(pod(container(resources={"limits": limits})))


def test_claims_are_mounts_and_memory_at_dev_shm_sizes_it() -> None:
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
        {"name": "out", "persistentVolumeClaim": {"claimName": "scratch"}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "unused", "configMap": {"name": "cfg"}},
    ]
    mounts = [
        {"name": "data", "mountPath": "/data"},
        {"name": "out", "mountPath": "/out", "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp", "mountPropagation": "None"},
    ]
    read_, notices = read(pod(container(volumeMounts=mounts), volumes=volumes))
    claim = "template.spec.volumes.{}.persistentVolumeClaim.claimName"
    assert read_.mounts == (
        Mount("imagenet", "/data", True, claim.format(0)),
        Mount("scratch", "/out", True, claim.format(1)),
    )
    assert read_.shm_bytes == 2**30
    assert "own /tmp" in notices["template.spec.volumes.3"]
    assert "no container mounts" in notices["template.spec.volumes.4"]
    assert f"{C}.volumeMounts.3.mountPropagation" in notices


@pytest.mark.parametrize(
    ("volume", "mount", "message"),
    [
        ({"configMap": {"name": "c"}}, {}, "volume of kind configMap"),
        ({"hostPath": {"path": "/x"}}, {}, "volume of kind hostPath"),
        ({"emptyDir": {}}, {}, "scratch space at /tmp"),
        ({"emptyDir": {"medium": "Memory"}}, {}, "scratch space at /tmp"),
        ({"persistentVolumeClaim": {"claimName": "v"}}, {"subPath": "a"}, "mounts a whole"),
    ],
)
def test_volumes_without_an_equivalent_are_refused(volume: dict, mount: dict, message: str) -> None:
    volumes = [{"name": "v"} | volume]
    mounts = [{"name": "v", "mountPath": "/somewhere"} | mount]
    with pytest.raises(KubeflowNotSupported, match=message):
        read(pod(container(volumeMounts=mounts), volumes=volumes))


def test_a_mount_of_no_volume_is_invalid() -> None:
    with pytest.raises(KubeflowInvalid, match="volumeMounts.0.name"):
        read(pod(container(volumeMounts=[{"name": "ghost", "mountPath": "/g"}])))


def test_sidecars_and_init_containers_are_refused() -> None:
    with pytest.raises(KubeflowNotSupported, match=r"has 2 \(main, sidecar\)"):
        read({"spec": {"containers": [container(), container(name="sidecar")]}})
    with pytest.raises(KubeflowNotSupported, match="init containers"):
        read(pod(initContainers=[container(name="fetch")]))
    with pytest.raises(KubeflowInvalid, match="containers: give one container"):
        read({"spec": {"containers": []}})


def test_what_only_kubernetes_reads_is_named_with_why() -> None:
    main = container(imagePullPolicy="Always", ports=[{"containerPort": 23456}], tty=True)
    template = pod(
        main,
        nodeSelector={"gpu": "a100"},
        tolerations=[{"key": "k"}],
        serviceAccountName="trainer",
        restartPolicy="OnFailure",
    )
    template["metadata"] = {"annotations": {"sidecar.istio.io/inject": "false"}}
    _, notices = read(template)
    assert "places a job's nodes itself" in notices["template.spec.nodeSelector"]
    assert "service account" in notices["template.spec.serviceAccountName"]
    assert "backoffLimit" in notices["template.spec.restartPolicy"]
    assert "rendezvous" in notices[f"{C}.ports"]
    assert "image pull" in notices[f"{C}.imagePullPolicy"]
    assert f"{C}.tty" in notices and "template.metadata" in notices
