"""The training operators' kinds: PyTorchJob and TFJob (``kubeflow.org/v1``, the training
operator's ``pytorch_types.go``, ``tensorflow_types.go``, ``common_types.go``) and MPIJob
(``kubeflow.org/v2beta1``, the MPI operator's ``types.go``), each read into a ``Plan``.

Every replica becomes nodes of one gang job: PyTorchJob's Master + Workers, TFJob's Chief
(or Master) + Workers, MPIJob's Workers (and the Launcher, when it runs as a worker). They
run one container, so the replicas must agree on what they run; their resources may differ
(each node gets the largest). A replica type gpupool cannot run (TF's PS, Evaluator) or an
elastic job is refused with a code of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from gpupool.errors import ElasticNotSupported, KubeflowNotSupported, TfPsNotSupported
from gpupool.services.kubeflow._assemble import PROCS_WORDS, Plan, Procs
from gpupool.services.kubeflow._fields import At
from gpupool.services.kubeflow._pods import RESTART, Container, Resources, read_pod
from gpupool.services.kubeflow._policies import check_min_available, read_metadata, read_run_policy

ELASTIC = (
    "elastic training (elasticPolicy) changes a job's nodes while it runs, and a gpupool job "
    "starts all its nodes together and keeps them: give a fixed number of replicas and leave "
    "elasticPolicy out"
)
SSH = "gpupool's MPI launcher reaches the other nodes through its own agent, not ssh"
LAUNCHER_START = "gpupool starts the launcher and the workers together"
SUCCESS = "a gpupool job over several nodes ends as its first node ends"
DYNAMIC = "a gpupool job keeps the nodes it started with"
# the fields two replicas must agree on: they run as one container on every node
SAME = ("image", "command", "args", "env", "workdir", "mounts", "shm_bytes")
N = TypeVar("N", int, float)
TF_RUNNING = ("Chief", "Master", "Worker")
TF_REFUSED = ("PS", "Evaluator")  # refused with replicas; written with none, nothing runs


@dataclass(frozen=True)
class Replica:
    kind: str
    count: int
    container: Container
    at: At


def pytorch_job(root: At) -> Plan:
    """A PyTorchJob: Master (at most one) + Workers; torch's launcher, ``nprocPerNode``."""
    spec = _spec(root)
    spec.refuse("elasticPolicy", ElasticNotSupported, ELASTIC)
    run = spec.map("runPolicy")
    policy = read_run_policy(run, read_metadata(root))
    replicas = read_replicas(spec, "pytorchReplicaSpecs", ("Master", "Worker"))
    _at_most_one(replicas, "Master")
    nodes = _nodes(spec, "pytorchReplicaSpecs", replicas)
    check_min_available(run, nodes)
    return Plan(
        container=one_container(list(replicas.values())),
        nodes=nodes,
        framework="torch",
        policy=policy,
        procs=read_procs(spec, "nprocPerNode"),
        procs_field=spec.where("nprocPerNode"),
    )


def tf_job(root: At) -> Plan:
    """A TFJob: Chief (or Master) + Workers; PS and Evaluator refused."""
    spec = _spec(root)
    _refuse_tf_types(spec)
    spec.ignore("successPolicy", SUCCESS)
    spec.ignore("enableDynamicWorker", DYNAMIC)
    run = spec.map("runPolicy")
    policy = read_run_policy(run, read_metadata(root))
    replicas = read_replicas(spec, "tfReplicaSpecs", (*TF_RUNNING, *TF_REFUSED))
    replicas = {kind: r for kind, r in replicas.items() if kind in TF_RUNNING}  # none refused
    chiefs = [kind for kind in ("Chief", "Master") if kind in replicas]
    if len(chiefs) > 1 or any(replicas[kind].count > 1 for kind in chiefs):
        raise spec.invalid("tfReplicaSpecs", "one Chief (or Master) replica, not both")
    nodes = _nodes(spec, "tfReplicaSpecs", replicas)
    check_min_available(run, nodes)
    container = one_container(list(replicas.values()))
    return Plan(container, nodes, "tensorflow", policy, chief=bool(chiefs))


def mpi_job(root: At) -> Plan:
    """An MPIJob (v2beta1): the Launcher's command on the first node, ``slotsPerWorker``
    ranks on each Worker; the workers' own command (sshd) dropped."""
    spec = _spec(root)
    run = spec.map("runPolicy")
    policy = read_run_policy(run, read_metadata(root))
    _mpi_fields(spec)
    slots = spec.number("slotsPerWorker", least=1) or 1
    as_worker = bool(spec.flag("runLauncherAsWorker"))
    replicas = read_replicas(spec, "mpiReplicaSpecs", ("Launcher", "Worker"))
    launcher = replicas.get("Launcher")
    if launcher is None or launcher.count != 1:
        raise spec.invalid("mpiReplicaSpecs", "one Launcher replica, which runs mpirun")
    workers = replicas.get("Worker")
    nodes = (workers.count if workers else 0) + (1 if as_worker else 0)
    if nodes < 1:
        raise spec.invalid("mpiReplicaSpecs", "Worker replicas, where the ranks run")
    check_min_available(run, nodes)
    worker = workers.container if workers else None
    container = launcher_and_workers(launcher.container, worker, as_worker, root)
    return Plan(container, nodes, "mpi", policy, procs=slots)


# -- replicas ---------------------------------------------------------------------------------


def _spec(root: At) -> At:
    spec = root.map("spec")
    if spec is None:
        raise root.invalid("spec", "the job's spec")
    return spec


def read_replicas(spec: At, key: str, known: tuple[str, ...]) -> dict[str, Replica]:
    """Each replica type of ``spec[key]`` with its count (default 1) and container, in the
    order of ``known``; KubeflowInvalid for a type the kind has not."""
    specs = spec.map(key)
    if specs is None or not specs.value:
        raise spec.invalid(key, f"the replicas: {', '.join(known)}")
    for kind in specs.value:
        if kind not in known:
            raise specs.invalid(kind, f"a replica type of this kind: {', '.join(known)}")
    found = {}
    for kind in (k for k in known if k in specs.value):
        at = specs.map(kind)
        if at is None:
            raise specs.invalid(kind, "the replica's spec")
        found[kind] = _replica(kind, at)
    return found


def _replica(kind: str, at: At) -> Replica:
    count = at.number("replicas")
    at.ignore("restartPolicy", RESTART)
    template = at.map("template")
    if template is None:
        raise at.invalid("template", "the replica's pod template")
    return Replica(kind, 1 if count is None else count, read_pod(template), at)


def _at_most_one(replicas: Mapping[str, Replica], kind: str) -> None:
    if kind in replicas and replicas[kind].count > 1:
        raise replicas[kind].at.invalid("replicas", f"1: a job has one {kind}")


def _nodes(spec: At, key: str, replicas: Mapping[str, Replica]) -> int:
    nodes = sum(replica.count for replica in replicas.values())
    if nodes < 1:
        raise spec.invalid(key, "at least one replica")
    return nodes


def one_container(replicas: list[Replica]) -> Container:
    """The container every node runs: the replicas' (with a count), which must agree on
    what they run; each resource the largest any of them asks, and the longest grace."""
    running = [r for r in replicas if r.count > 0] or replicas[:1]
    first = running[0]
    for other in running[1:]:
        _agree(first, other)
    return replace(
        first.container,
        resources=_largest([r.container.resources for r in running], first),
        grace_seconds=max(
            (r.container.grace_seconds for r in running if r.container.grace_seconds),
            default=None,
        ),
    )


def _agree(first: Replica, other: Replica) -> None:
    for name in SAME:
        if getattr(first.container, name) != getattr(other.container, name):
            raise other.at.error(
                "template",
                KubeflowNotSupported,
                f"the {first.kind} and {other.kind} replicas differ in their container's "
                f"{name}: gpupool runs the same container on every node of a job; make them "
                "the same",
            )
    if first.container.priority_class != other.container.priority_class:
        raise other.at.invalid("template", f"the same priorityClassName as the {first.kind}")


def _largest(all_: list[Resources], first: Replica) -> Resources:
    largest = largest_of(all_)
    if any(r != largest for r in all_):
        first.at.fields.note(
            f"{first.container.field}.resources",
            "the replicas ask for different resources: every node gets the largest of each",
        )
    return largest


def largest_of(all_: Sequence[Resources]) -> Resources:
    """Each resource the largest any of ``all_`` asks."""
    return Resources(
        gpus=_most([r.gpus for r in all_]),
        cpus=_most([r.cpus for r in all_]),
        memory=_most([r.memory for r in all_]),
    )


def _most(values: Sequence[N | None]) -> N | None:
    given = [v for v in values if v is not None]
    return max(given) if given else None


def read_procs(at: At, key: str) -> Procs | None:
    """Processes per node as written: 2, "2", or "auto", "gpu", "cpu"."""
    value = at.raw(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
        return int(value)
    if isinstance(value, str) and value.strip() in PROCS_WORDS:
        return value.strip()  # type: ignore[return-value] - one of PROCS_WORDS
    raise at.invalid(key, 'a number of processes (2 or "2"), or "auto", "gpu" or "cpu"')


# -- TFJob and MPIJob -------------------------------------------------------------------------


def _refuse_tf_types(spec: At) -> None:
    specs = spec.value.get("tfReplicaSpecs")
    if not isinstance(specs, dict):
        return
    if _count(specs.get("PS")):
        raise spec.error(
            "tfReplicaSpecs",
            TfPsNotSupported,
            "parameter servers (PS replicas) are TensorFlow's ParameterServerStrategy, which "
            "gpupool does not run: use MultiWorkerMirroredStrategy (Chief and Workers only)",
        )
    if _count(specs.get("Evaluator")):
        raise spec.error(
            "tfReplicaSpecs",
            KubeflowNotSupported,
            "an Evaluator runs beside the cluster, which gpupool does not do: evaluate in a "
            "Job of its own that depends on this one",
        )
    for kind in TF_REFUSED:
        if kind in specs:  # written with 0 replicas: nothing to run
            spec.fields.note(f"spec.tfReplicaSpecs.{kind}", "0 replicas: nothing runs")


def _count(replica: object) -> int:
    if not isinstance(replica, dict):
        return 0
    count = replica.get("replicas", 1)
    return count if isinstance(count, int) else 1


def _mpi_fields(spec: At) -> None:
    spec.ignore("sshAuthMountPath", SSH)
    spec.ignore("launcherCreationPolicy", LAUNCHER_START)
    implementation = spec.text("mpiImplementation")
    if implementation not in (None, "OpenMPI"):
        raise spec.error(
            "mpiImplementation",
            KubeflowNotSupported,
            f"gpupool's MPI launcher is Open MPI's, not {implementation}: use OpenMPI",
        )


def launcher_and_workers(
    launcher: Container, worker: Container | None, as_worker: bool, root: At
) -> Container:
    """One container for every node: the Launcher's command, args, env and working
    directory; the Workers' image (where the ranks run) and resources; the volumes of both.
    The Workers' own command (an sshd) is dropped: gpupool starts the ranks itself."""
    if worker is None:
        return launcher
    if worker.command is not None or worker.args is not None:
        root.fields.note(
            f"{worker.field}.command",
            "gpupool starts the ranks on the workers itself (its rsh agent): the workers' "
            "command and args are not run",
        )
    if worker.image and launcher.image and worker.image != launcher.image:
        root.fields.note(
            launcher.image_field,
            f"every node runs the workers' image ({worker.image}), the launcher's mpirun too",
        )
    if launcher.resources != worker.resources and not as_worker:
        root.fields.note(
            f"{launcher.field}.resources",
            "the launcher runs on the first node, within the workers' resources",
        )
    return _merged(launcher, worker, as_worker)


def _merged(launcher: Container, worker: Container, as_worker: bool) -> Container:
    both = [launcher.resources, worker.resources]
    mounts = {m.path: m for m in (*worker.mounts, *launcher.mounts)}
    return replace(
        launcher,
        image=worker.image or launcher.image,
        image_field=worker.image_field if worker.image else launcher.image_field,
        env=tuple({**dict(worker.env), **dict(launcher.env)}.items()),
        resources=largest_of(both) if as_worker else worker.resources,
        mounts=tuple(mounts.values()),
        shm_bytes=launcher.shm_bytes or worker.shm_bytes,
    )
