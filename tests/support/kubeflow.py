"""Kubeflow manifests for tests, built as their users write them, and a fake of what their
translation looks up (``services.kubeflow.Lookups``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.services import kubeflow

MANIFESTS = Path("data") / "manifests"  # under the shared checkout (SOURCES.md there)


@dataclass
class FakeLookups:
    """Images by reference, volumes and datasets by name, priority classes: as given."""

    images: dict[str, kubeflow.ImageFacts] = field(default_factory=dict)
    volumes: set[str] = field(default_factory=set)
    datasets: set[str] = field(default_factory=set)
    classes: dict[str, int] = field(default_factory=dict)
    teams_asked: list[str | None] = field(default_factory=list)

    @property
    def priority_classes(self) -> Mapping[str, int]:
        return self.classes

    def image(self, reference: str, team: str | None) -> kubeflow.ImageFacts | None:
        self.teams_asked.append(team)
        return self.images.get(reference)

    def storage(self, name: str, team: str | None) -> kubeflow.Storage | None:
        self.teams_asked.append(team)
        if name in self.volumes:
            return "volume"
        return "dataset" if name in self.datasets else None


def image(name: str, *cmd: str, entrypoint: tuple[str, ...] = (), workdir: str = "") -> Any:
    """A gpupool image's facts."""
    return kubeflow.ImageFacts(name, entrypoint, tuple(cmd), workdir)


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "pt:1"} | fields


def pod(main: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod template of one container (``container()`` when none is given)."""
    return {"spec": {"containers": [main if main is not None else container()]} | spec}


def replica(count: int | None = 1, template: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": template if template is not None else pod()}
    return spec if count is None else {"replicas": count} | spec


def pytorch_job(
    replicas: dict[str, Any] | None = None, name: str = "pt", **spec: Any
) -> dict[str, Any]:
    """A PyTorchJob (Master 1 + Worker 1 unless ``replicas`` says)."""
    replicas = replicas if replicas is not None else {"Master": replica(), "Worker": replica()}
    return _job("kubeflow.org/v1", "PyTorchJob", name, {"pytorchReplicaSpecs": replicas} | spec)


def tf_job(replicas: dict[str, Any], name: str = "tf", **spec: Any) -> dict[str, Any]:
    return _job("kubeflow.org/v1", "TFJob", name, {"tfReplicaSpecs": replicas} | spec)


def mpi_job(replicas: dict[str, Any], name: str = "mpi", **spec: Any) -> dict[str, Any]:
    return _job("kubeflow.org/v2beta1", "MPIJob", name, {"mpiReplicaSpecs": replicas} | spec)


def train_job(runtime: str, name: str = "tj", **spec: Any) -> dict[str, Any]:
    body = {"runtimeRef": {"name": runtime}} | spec
    return _job("trainer.kubeflow.org/v1alpha1", "TrainJob", name, body)


def runtime(
    name: str, ml_policy: dict[str, Any], jobs: list[dict[str, Any]], cluster: bool = True
) -> dict[str, Any]:
    """A (Cluster)TrainingRuntime of replicated ``jobs`` (see ``replicated``)."""
    kind = "ClusterTrainingRuntime" if cluster else "TrainingRuntime"
    spec = {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": jobs}}}
    return _job("trainer.kubeflow.org/v1alpha1", kind, name, spec)


def replicated(name: str, template: dict[str, Any], trainer: bool = False) -> dict[str, Any]:
    """A JobSet's replicated job whose pod is ``template``; ``trainer``: the ancestor label."""
    job: dict[str, Any] = {"spec": {"template": template}}
    if trainer:
        labels = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
        job["metadata"] = {"labels": labels}
    return {"name": name, "template": job}


def _job(version: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": version, "kind": kind, "metadata": {"name": name}, "spec": spec}
