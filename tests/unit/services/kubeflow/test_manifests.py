"""The operators' own example manifests (../shared/data/manifests, SOURCES.md there says what
a translator must do with each), translated with every image they name a gpupool image:
each runs as SOURCES.md says, or is refused with its code. Katib's Experiments are not this
translator's (the experiments' own tests read them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupool.cli.jobfiles import load_documents
from gpupool.errors import GpupoolError
from gpupool.services import kubeflow
from tests.support.kubeflow import MANIFESTS, FakeLookups, image

# file -> (nodes, launcher, mode, procs per node, the command's start) of its job, or the code
# it is refused with
EXPECTED: dict[str, tuple[Any, ...] | str] = {
    "trainer/examples__pytorch__simple.yaml": (2, "torch", None, None, ["python3"]),
    "trainer/examples__pytorch__cpu-demo__demo.yaml": (2, "torch", "per-node", 2, ["torchrun"]),
    "trainer/examples__pytorch__elastic__echo__echo.yaml": "elastic_not_supported",
    "trainer/examples__tensorflow__dist-mnist__tf_job_mnist.yaml": "tf_ps_not_supported",
    "trainer/examples__tensorflow__simple.yaml": (2, "tensorflow", None, None, ["python"]),
    "mpi-operator/examples__v2beta1__pi__pi.yaml": (2, "mpi", "mpirun", 1, ["mpirun", "-n"]),
    "trainer/manifests__base__runtimes__torch_distributed.yaml": (),  # a runtime: no job
    "trainer/examples__yaml__01-multi-node.yaml": (3, "torch", "per-node", 1, ["torchrun"]),
    "trainer/examples__yaml__04-volcano-integration.yaml": (4, "torch", None, None, ["python3"]),
}


def documents(shared: Path, name: str) -> list[dict[str, Any]]:
    path = shared / MANIFESTS / name
    return [doc.data for doc in load_documents(path.read_text(), name)]


# every image the files name (their own or their runtime's), as a gpupool image without a Cmd
IMAGES = (
    "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
    "pytorch-cpu:py3.8",
    "ghcr.io/kubeflow/training-v1/tf-mnist-with-summaries:latest",
    "mpioperator/mpi-pi:openmpi",
    "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
)


def test_every_training_manifest_of_the_shared_data_is_here(shared_dir: Path) -> None:
    written = {
        str(p.relative_to(shared_dir / MANIFESTS)) for p in (shared_dir / MANIFESTS).rglob("*.yaml")
    }
    assert {name for name in written if not name.startswith("katib/")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_manifest_runs_or_is_refused_as_sources_says(shared_dir: Path, name: str) -> None:
    manifests = documents(shared_dir, name)
    lookups = FakeLookups(images={reference: image(reference) for reference in IMAGES})
    runtimes = {}
    for manifest in manifests:
        runtime = kubeflow.runtime_of(manifest)
        if runtime is not None:
            runtimes[(runtime.kind, runtime.name)] = runtime
    expected = EXPECTED[name]
    if isinstance(expected, str):
        with pytest.raises(GpupoolError) as raised:
            kubeflow.translate(manifests[-1], runtimes, lookups, False)
        assert raised.value.code == expected
        return
    jobs = [kubeflow.translate(m, runtimes, lookups, False).job for m in manifests]
    made = [job for job in jobs if job is not None]
    if not expected:
        assert made == []
        return
    [job] = made
    nodes, launcher, mode, procs, start = expected
    assert (job.nodes, job.launcher, job.launcher_mode, job.procs_per_node) == (
        nodes,
        launcher,
        mode,
        procs,
    )
    assert job.command[: len(start)] == start and job.image is not None
    assert job.resources.gpus is None
