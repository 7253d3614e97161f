"""Kubeflow Trainer's kinds (``trainer.kubeflow.org/v1alpha1``: ``trainjob_types.go``,
``trainingruntime_types.go``): a TrainJob runs on a runtime, which gives its framework
(``mlPolicy``: torch or MPI), its node count and the trainer's container; the TrainJob's
``trainer`` overrides the image, command, args, env, resources, nodes and processes.

A runtime is a built-in one (``torch-distributed``; ``deepspeed-distributed`` and
``mpi-distributed``, MPI-based) or a (Cluster)TrainingRuntime given in the same file, which
makes no job of its own. The trainer's container is the replicated job marked
``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` (else the one named ``node``): the
node's for torch, the launcher's for MPI, whose ``node`` job's container (an sshd) is
dropped as an MPIJob's workers' is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpupool.domain.jobfiles import Notice
from gpupool.errors import (
    ElasticNotSupported,
    KubeflowNotSupported,
    UnknownRuntime,
)
from gpupool.services.kubeflow._assemble import Framework, Plan, Procs
from gpupool.services.kubeflow._fields import At
from gpupool.services.kubeflow._operators import (
    ELASTIC,
    SSH,
    launcher_and_workers,
    read_procs,
)
from gpupool.services.kubeflow._pods import Container, expand, read_env, read_pod, read_resources
from gpupool.services.kubeflow._policies import GANG, MANAGED, read_limits, read_metadata

GROUP = "trainer.kubeflow.org"
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
RUNTIME = "TrainingRuntime"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
INITIALIZER = (
    "gpupool runs no initializer step: give the job its data and model as gpupool datasets or "
    "volumes (a persistentVolumeClaim of their name in the runtime)"
)
PATCHES = (
    "gpupool does not patch a runtime's pods: write what they need in the runtime's template "
    "(a TrainingRuntime in the same file)"
)
LABELS = "labels and annotations mean nothing to gpupool"


@dataclass(frozen=True)
class Runtime:
    """What a TrainJob takes from its runtime. ``trainer``: the container the TrainJob's
    trainer overrides; ``node``: for MPI, the other nodes' (dropped as an MPIJob's workers'
    command); ``notices``: the runtime document's own."""

    name: str
    kind: str
    framework: Framework | None
    trainer: Container
    node: Container | None = None
    num_nodes: int = 1
    procs: Procs | None = None
    launcher_as_node: bool = False
    notices: tuple[Notice, ...] = ()


# Trainer's own runtimes (manifests/base/runtimes): what a TrainJob may name without a file
BUILT_IN: Mapping[str, Runtime] = {
    runtime.name: runtime
    for runtime in (
        Runtime(
            "torch-distributed",
            CLUSTER_RUNTIME,
            "torch",
            Container(image="pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"),
        ),
        Runtime(
            "deepspeed-distributed",
            CLUSTER_RUNTIME,
            "mpi",
            Container(image="ghcr.io/kubeflow/trainer/deepspeed-runtime"),
            procs=1,
            launcher_as_node=True,
        ),
        Runtime(
            "mpi-distributed",
            CLUSTER_RUNTIME,
            "mpi",
            Container(image="mpioperator/mpi-pi:openmpi"),
            procs=1,
            launcher_as_node=True,
        ),
    )
}


def read_runtime(root: At, kind: str) -> Runtime:
    """A (Cluster)TrainingRuntime document as what a TrainJob takes from it."""
    metadata = root.map("metadata")
    name = metadata.text("name") if metadata is not None else None
    if metadata is None or not name:
        raise root.invalid("metadata", "the runtime's name (metadata.name)")
    metadata.ignore("labels", LABELS)
    metadata.ignore("annotations", LABELS)
    metadata.ignore("namespace", "gpupool has no namespaces: a TrainJob of the file uses it")
    spec = root.map("spec")
    if spec is None:
        raise root.invalid("spec", "the runtime's spec")
    spec.ignore("podGroupPolicy", GANG)
    runtime = _ml_policy(spec.map("mlPolicy"), Runtime(name, kind, None, Container()))
    trainer, node = _replicated_jobs(spec, runtime.framework)
    runtime = replace(runtime, trainer=trainer, node=node)
    return replace(runtime, notices=tuple(root.fields.all_notices()))


def train_job(root: At, runtimes: Mapping[tuple[str, str], Runtime]) -> Plan:
    """A TrainJob on the runtime its ``runtimeRef`` names (one of ``runtimes``, the file's,
    by kind and name, else a built-in one)."""
    spec = root.map("spec")
    if spec is None:
        raise root.invalid("spec", "the TrainJob's spec")
    _train_job_fields(spec)
    policy = read_limits(spec, read_metadata(root))
    runtime = _runtime(spec, runtimes)
    for notice in runtime.notices:
        root.fields.note(f"{runtime.kind} {runtime.name}: {notice.field}", notice.message)
    trainer = spec.map("trainer")
    container = _overridden(runtime.trainer, trainer)
    if runtime.framework == "mpi":
        container = launcher_and_workers(container, runtime.node, runtime.launcher_as_node, root)
    nodes = trainer.number("numNodes", least=1) if trainer is not None else None
    procs = read_procs(trainer, "numProcPerNode") if trainer is not None else None
    return Plan(
        container=container,
        nodes=nodes or runtime.num_nodes,
        framework=runtime.framework,
        policy=policy,
        procs=procs if procs is not None else runtime.procs,
        procs_field="spec.trainer.numProcPerNode",
        procs_default="auto" if runtime.framework == "torch" else None,
    )


# -- a TrainJob -------------------------------------------------------------------------------


def _train_job_fields(spec: At) -> None:
    spec.ignore("managedBy", MANAGED)
    spec.ignore("labels", LABELS)
    spec.ignore("annotations", LABELS)
    spec.refuse("initializer", KubeflowNotSupported, INITIALIZER)
    spec.refuse("podSpecOverrides", KubeflowNotSupported, PATCHES)
    spec.refuse("runtimePatches", KubeflowNotSupported, PATCHES)


def _runtime(spec: At, runtimes: Mapping[tuple[str, str], Runtime]) -> Runtime:
    ref = spec.map("runtimeRef")
    name = ref.text("name") if ref is not None else None
    if ref is None or not name:
        raise spec.invalid("runtimeRef", "the runtime's name (runtimeRef.name)")
    group = ref.text("apiGroup") or GROUP
    kind = ref.text("kind") or CLUSTER_RUNTIME
    if group != GROUP or kind not in (CLUSTER_RUNTIME, RUNTIME):
        raise ref.invalid("kind", f"a {CLUSTER_RUNTIME} or {RUNTIME} of {GROUP}")
    found = runtimes.get((kind, name))
    if found is None and kind == CLUSTER_RUNTIME:
        found = BUILT_IN.get(name)
    if found is None:
        defined = ", ".join(sorted({n for _, n in runtimes} | set(BUILT_IN)))
        message = (
            f"{ref.where('name')}: no {kind} named {name}: use one of {defined}, or define it "
            "in the same file"
        )
        raise UnknownRuntime(message, fields=[{"field": ref.where("name"), "message": "unknown"}])
    return found


def _overridden(container: Container, trainer: At | None) -> Container:
    """The runtime's trainer container with what the TrainJob's ``trainer`` gives."""
    base = replace(container, field="spec.trainer", image_field="spec.runtimeRef.name")
    if trainer is None:
        return base
    image = trainer.text("image")
    env = dict(base.env) | dict(read_env(trainer))
    command, args = trainer.strings("command"), trainer.strings("args")
    resources = trainer.map("resourcesPerNode")
    return replace(
        base,
        image=image or base.image,
        image_field=trainer.where("image") if image else base.image_field,
        env=tuple(env.items()),
        command=base.command if command is None else tuple(expand(c, env) for c in command),
        args=base.args if args is None else tuple(expand(a, env) for a in args),
        resources=base.resources if resources is None else read_resources(resources),
    )


# -- a runtime --------------------------------------------------------------------------------


def _ml_policy(ml: At | None, runtime: Runtime) -> Runtime:
    if ml is None:  # a plain runtime: the command as it is on every node
        return runtime
    runtime = replace(runtime, num_nodes=ml.number("numNodes", least=1) or 1)
    for other in ("flux", "jax", "xgboost"):
        if other in ml.value:  # written empty ({}) too: the policy is chosen by its key
            why = f"gpupool runs torch and MPI runtimes, not {other}"
            raise ml.error(other, KubeflowNotSupported, why)
    torch, mpi = ml.map("torch"), ml.map("mpi")
    if torch is not None:
        torch.refuse("elasticPolicy", ElasticNotSupported, ELASTIC)
        torch.ignore("envInjection", "gpupool sets torch's variables in the trainer's container")
        return replace(runtime, framework="torch", procs=read_procs(torch, "numProcPerNode"))
    if mpi is not None:
        return _mpi_policy(mpi, runtime)
    return runtime


def _mpi_policy(mpi: At, runtime: Runtime) -> Runtime:
    mpi.ignore("sshAuthMountPath", SSH)
    implementation = mpi.text("mpiImplementation")
    if implementation not in (None, "OpenMPI"):
        raise mpi.error(
            "mpiImplementation",
            KubeflowNotSupported,
            f"gpupool's MPI launcher is Open MPI's, not {implementation}: use OpenMPI",
        )
    return replace(
        runtime,
        framework="mpi",
        procs=mpi.number("numProcPerNode", least=1) or 1,
        launcher_as_node=bool(mpi.flag("runLauncherAsNode")),
    )


def _replicated_jobs(spec: At, framework: Framework | None) -> tuple[Container, Container | None]:
    """The trainer's container and, for MPI, the other nodes'."""
    template = spec.map("template")
    jobset = template.map("spec") if template is not None else None
    if template is None or jobset is None:
        raise spec.invalid("template", "the runtime's JobSet template (template.spec)")
    template.ignore("metadata", LABELS)
    jobs = {_job_name(job): job for job in jobset.maps("replicatedJobs")}
    trainer = next((n for n, job in jobs.items() if _is_trainer(job)), "node")
    if trainer not in jobs:
        raise jobset.invalid("replicatedJobs", "a replicated job named node, the trainer's")
    others = [name for name in jobs if name != trainer]
    node = "node" if framework == "mpi" and "node" in others else None
    for name in others:
        if name != node:
            jobs[name].fields.notice(jobs[name].path, INITIALIZER)
    return _pod_of(jobs[trainer]), None if node is None else _pod_of(jobs[node])


def _job_name(job: At) -> str:
    name = job.text("name")
    if not name:
        raise job.invalid("name", "the replicated job's name")
    job.ignore("replicas", "the TrainJob's numNodes gives the nodes")
    job.ignore("dependsOn", "gpupool starts a job's nodes together")
    return name


def _is_trainer(job: At) -> bool:
    template = job.map("template")
    metadata = template.map("metadata") if template is not None else None
    labels = metadata.map("labels") if metadata is not None else None
    if labels is None or labels.value.get(ANCESTOR) != "trainer":
        return False
    labels.raw(ANCESTOR)
    return True


def _pod_of(job: At) -> Container:
    template = job.map("template")  # a batch/v1 JobTemplateSpec
    spec = template.map("spec") if template is not None else None
    pod = spec.map("template") if spec is not None else None
    if template is None or spec is None or pod is None:
        raise job.invalid("template", "the replicated job's template.spec.template (its pod)")
    return read_pod(pod)
