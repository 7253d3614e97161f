"""Kubeflow training manifests as gpupool jobs: a PyTorchJob or TFJob (``kubeflow.org/v1``),
an MPIJob (``kubeflow.org/v2beta1``) or a TrainJob (``trainer.kubeflow.org/v1alpha1``, on a
built-in runtime or a (Cluster)TrainingRuntime of the same file), taken unchanged and
translated into one gang job (docs/kubeflow.md).

Pure translation, manifest -> ``JobBody`` and notices (Katib's v1beta1 Experiment: an
``ExperimentSpec``, ``_katib`` and ``_katib_trials``): every field of a manifest is honoured,
mapped, refused with a stable code, or named in a notice as ignored -- never dropped silently.
What it looks up (an image, a volume or dataset, the site's priority classes) it asks of a
``Lookups`` its caller gives (``services.jobfiles`` implements it).
Reading a manifest: ``_fields`` (what was read), ``_quantities``, ``_pods`` (a pod
template), ``_policies`` (metadata, run policy); the kinds: ``_operators``, ``_trainer``;
the job made of them: ``_assemble``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.domain.experiments import ExperimentSpec
from gpupool.domain.jobfiles import JobBody, Notice
from gpupool.errors import KubeflowNotSupported
from gpupool.services.kubeflow._assemble import Plan, assemble, runs_torchrun
from gpupool.services.kubeflow._fields import At, Fields, refuse_unstorable
from gpupool.services.kubeflow._katib import experiment_from_katib
from gpupool.services.kubeflow._operators import mpi_job, pytorch_job, tf_job
from gpupool.services.kubeflow._ports import ImageFacts, Lookups, Storage
from gpupool.services.kubeflow._trainer import (
    CLUSTER_RUNTIME,
    RUNTIME,
    Runtime,
    read_runtime,
    train_job,
)

Runtimes = Mapping[tuple[str, str], Runtime]
_JOBS: Mapping[tuple[str, str], Callable[[At, Runtimes], Plan]] = {
    ("kubeflow.org/v1", "PyTorchJob"): lambda root, _runtimes: pytorch_job(root),
    ("kubeflow.org/v1", "TFJob"): lambda root, _runtimes: tf_job(root),
    ("kubeflow.org/v2beta1", "MPIJob"): lambda root, _runtimes: mpi_job(root),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): train_job,
}
_RUNTIMES = {("trainer.kubeflow.org/v1alpha1", kind) for kind in (CLUSTER_RUNTIME, RUNTIME)}
KATIB_EXPERIMENT = ("kubeflow.org/v1beta1", "Experiment")
KINDS = tuple(
    f"{version} {kind}" for version, kind in (*_JOBS, *sorted(_RUNTIMES), KATIB_EXPERIMENT)
)


@dataclass(frozen=True)
class Translated:
    """A manifest translated: the job it runs as (None for a runtime, which makes none, and
    for Katib's Experiment, which is a gpupool ``experiment``) and the notices of its fields
    that gpupool does not honour."""

    kind: str
    name: str | None
    job: JobBody | None
    notices: tuple[Notice, ...]
    experiment: ExperimentSpec | None = None


def runtime_of(manifest: dict[str, Any]) -> Runtime | None:
    """The (Cluster)TrainingRuntime ``manifest`` defines; None for another kind."""
    key = (manifest.get("apiVersion"), manifest.get("kind"))
    if key not in _RUNTIMES:
        return None
    refuse_unstorable(manifest)
    return read_runtime(Fields(manifest).root(), str(key[1]))


def translate(
    manifest: dict[str, Any], runtimes: Runtimes, lookups: Lookups, ignore_image: bool
) -> Translated:
    """The gpupool job of ``manifest`` (``runtimes``: those of its file, by kind and name;
    ``ignore_image``: run on the nodes' own system, whatever image a container names)."""
    refuse_unstorable(manifest)
    version, kind = str(manifest.get("apiVersion")), str(manifest.get("kind"))
    name = (manifest.get("metadata") or {}).get("name")
    fields = Fields(manifest)
    if (version, kind) in _RUNTIMES:
        runtime = read_runtime(fields.root(), kind)
        return Translated(kind, name, None, runtime.notices)
    if (version, kind) == KATIB_EXPERIMENT:
        spec, notices = experiment_from_katib(manifest, lookups, ignore_image, runtimes)
        return Translated(kind, name, None, tuple(notices), spec)
    read = _JOBS.get((version, kind))
    if read is None:
        raise _unknown(version, kind)
    plan = read(fields.root(), runtimes)
    job = assemble(plan, fields.root(), lookups, ignore_image)
    return Translated(kind, name, job, tuple(fields.all_notices()))


def _unknown(version: str, kind: str) -> KubeflowNotSupported:
    known = ", ".join(KINDS)
    return KubeflowNotSupported(
        f"kind {kind} of {version} is not one gpupool translates: it takes {known}",
        fields=[{"field": "kind", "message": f"one of {known}"}],
    )


__all__ = [
    "KATIB_EXPERIMENT",
    "KINDS",
    "ImageFacts",
    "Lookups",
    "Runtime",
    "Runtimes",
    "Storage",
    "Translated",
    "runs_torchrun",
    "runtime_of",
    "translate",
]
