"""A replica's pod template (core/v1 PodTemplateSpec) as what it asks of one node.

gpupool runs one process tree per node, in its sandbox, as the submitting user: a pod's one
container maps onto it (image, command, args, env, working directory, resources, volume
mounts, /dev/shm), its pod's priority class and grace period onto the job. What a pod says
to Kubernetes alone (where to place it, which account, probes) is named as ignored, each
with why; what the job could not run without (a sidecar, an init container, a ConfigMap's
files) is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.domain.jobs import RESERVED_ENV
from gpupool.errors import KubeflowNotSupported
from gpupool.services.kubeflow._fields import At, dotted
from gpupool.services.kubeflow._quantities import byte_count, quantity, whole

GPU = "nvidia.com/gpu"
SHM = "/dev/shm"
# a sandbox has its own /tmp: an emptyDir there is what the job gets anyway
SCRATCH = "/tmp"

PLACEMENT = "gpupool places a job's nodes itself (by GPUs, GPU type and fabric)"
SANDBOX = "a job runs as its submitter, in gpupool's sandbox"
ACCOUNT = "a job has no Kubernetes service account: gpupool's own token is GPUPOOL_TOKEN"
PULL = "gpupool runs the image it holds: pull a new one with 'gpupool image pull'"
PORTS = "gpupool chooses the ports of a job's rendezvous itself (MASTER_PORT, TF_CONFIG)"
PROBES = "gpupool watches a job's processes, not probes"
NETWORK = "a job has its own network on one node and the nodes' own over several"
RESTART = "gpupool requeues a whole job as runPolicy.backoffLimit says (retries), not a pod"
POD_METADATA = "a pod's labels and annotations mean nothing to gpupool"
ENV_FROM = "ConfigMaps and Secrets are not gpupool's: give the variables in env"
VALUE_FROM = "valueFrom reads Kubernetes objects, which gpupool has not: the variable is unset"
NOT_MOUNTED = "no container mounts this volume"

# pod spec fields named as ignored, each with why
POD_IGNORED: Mapping[str, str] = {
    "restartPolicy": RESTART,
    "nodeSelector": PLACEMENT,
    "nodeName": PLACEMENT,
    "affinity": PLACEMENT,
    "tolerations": PLACEMENT,
    "topologySpreadConstraints": PLACEMENT,
    "schedulerName": "gpupool schedules every job itself",
    "securityContext": SANDBOX,
    "serviceAccountName": ACCOUNT,
    "serviceAccount": ACCOUNT,
    "automountServiceAccountToken": ACCOUNT,
    "imagePullSecrets": PULL,
    "hostNetwork": NETWORK,
    "hostIPC": SANDBOX,
    "hostPID": SANDBOX,
    "dnsPolicy": NETWORK,
}
CONTAINER_IGNORED: Mapping[str, str] = {
    "imagePullPolicy": PULL,
    "ports": PORTS,
    "securityContext": SANDBOX,
    "livenessProbe": PROBES,
    "readinessProbe": PROBES,
    "startupProbe": PROBES,
    "envFrom": ENV_FROM,
}
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


@dataclass(frozen=True)
class Resources:
    """Per node: whole GPUs, CPUs and memory in bytes (None: not asked)."""

    gpus: int | None = None
    cpus: float | None = None
    memory: int | None = None


@dataclass(frozen=True)
class Mount:
    """A PersistentVolumeClaim mounted at ``path``: a gpupool volume or dataset of the
    claim's name. ``field``: where the mount is written, for messages."""

    claim: str
    path: str
    read_only: bool
    field: str


@dataclass(frozen=True)
class Container:
    """What one replica asks of its node. ``command``/``args`` None: left to the image, as
    Kubernetes leaves them (Entrypoint, Cmd). ``field``: where the container is written."""

    field: str = ""
    image: str | None = None
    image_field: str = ""
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    resources: Resources = Resources()
    mounts: tuple[Mount, ...] = ()
    shm_bytes: int | None = None
    grace_seconds: float | None = None
    priority_class: str | None = None


def read_pod(template: At) -> Container:
    """The replica's pod template as its node's container (see the module's docstring)."""
    template.ignore("metadata", POD_METADATA)
    spec = template.map("spec")
    if spec is None:
        raise template.invalid("spec", "the pod's spec, with its containers")
    container = _one(spec)
    volumes = {_volume_name(v): v for v in spec.maps("volumes")}
    mounts, shm = _mounts(container, volumes)
    for name, volume in volumes.items():
        if not any(volume.path == v.path for v in mounts.values()):
            volume.fields.notice(volume.path, f"{NOT_MOUNTED} ({name})")
    _pod_ignored(spec)
    return _container(container, spec, tuple(m for m in mounts.values() if m), shm)


def _one(spec: At) -> At:
    spec.refuse(
        "initContainers",
        KubeflowNotSupported,
        "gpupool runs no init containers: run that step as a Job of its own that this one "
        "depends on (depends_on in a gpupool Job document)",
    )
    containers = spec.maps("containers")
    if not containers:
        raise spec.invalid("containers", "one container")
    if len(containers) > 1:
        names = ", ".join(str(c.value.get("name")) for c in containers)
        raise spec.error(
            "containers",
            KubeflowNotSupported,
            f"gpupool runs one container per node, and this pod has {len(containers)} "
            f"({names}): leave the sidecars out",
        )
    return containers[0]


def _container(container: At, pod: At, mounts: tuple[_Mounted, ...], shm: int | None) -> Container:
    container.raw("name")
    for key, why in CONTAINER_IGNORED.items():
        container.ignore(key, why)
    env = read_env(container)
    known = dict(env)
    command, args = container.strings("command"), container.strings("args")
    grace = pod.number("terminationGracePeriodSeconds")
    return Container(
        field=dotted(container.path),
        image=container.text("image"),
        image_field=container.where("image"),
        command=None if command is None else tuple(expand(c, known) for c in command),
        args=None if args is None else tuple(expand(a, known) for a in args),
        env=env,
        workdir=container.text("workingDir"),
        resources=read_resources(container.map("resources")),
        mounts=tuple(m.mount for m in mounts if m.mount is not None),
        shm_bytes=shm,
        grace_seconds=None if grace is None else float(grace),
        priority_class=pod.text("priorityClassName"),
    )


def _pod_ignored(spec: At) -> None:
    for key, why in POD_IGNORED.items():
        spec.ignore(key, why)


# -- env --------------------------------------------------------------------------------------


def read_env(container: At) -> tuple[tuple[str, str], ...]:
    """``value`` variables, each expanded as Kubernetes does with those before it;
    ``valueFrom`` and gpupool's own variables named as ignored."""
    known: dict[str, str] = {}
    for item in container.maps("env"):
        name = item.text("name")
        if not name:
            raise item.invalid("name", "the variable's name")
        item.ignore("valueFrom", VALUE_FROM)
        if name.startswith(RESERVED_ENV[0]) or name in RESERVED_ENV[1:]:
            item.fields.notice((*item.path, "name"), f"{name} is set by gpupool")
            item.raw("value")
            continue
        value = item.raw("value")
        if value is not None or not item.has("valueFrom"):
            known[name] = expand(_string(item, value), known)
    return tuple(known.items())


def _string(item: At, value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise item.invalid("value", "a string")
    return str(value)


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(NAME)`` replaced by the variable's value when it is defined, ``$$`` by ``$``, as
    Kubernetes expands command, args and env (a reference to no variable stays as written)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return _REFERENCE.sub(one, text)


# -- resources --------------------------------------------------------------------------------


def read_resources(resources: At | None) -> Resources:
    """GPUs, CPUs and memory from limits, else requests; other resources named as
    ignored (another vendor's GPUs refused: the job would run without them)."""
    if resources is None:
        return Resources()
    limits, requests = resources.map("limits"), resources.map("requests")
    resources.ignore("claims", "gpupool has no dynamic resource claims")
    for side in (s for s in (limits, requests) if s is not None):
        _other_resources(side)
    return Resources(
        gpus=_amount(GPU, limits, requests, whole),
        cpus=_cpus(limits, requests),
        memory=_amount("memory", limits, requests, byte_count),
    )


def _other_resources(side: At) -> None:
    for name in side.value:
        if name in (GPU, "cpu", "memory"):
            continue
        if "gpu" in name.lower():
            raise side.error(
                name,
                KubeflowNotSupported,
                f"gpupool gives NVIDIA GPUs ({GPU}), not {name}",
            )
        side.ignore(name, "gpupool counts GPUs, CPUs and memory only")


def _cpus(limits: At | None, requests: At | None) -> float | None:
    amount = _amount("cpu", limits, requests, quantity)
    if amount is None:
        return None
    if amount <= 0:
        where = limits if limits is not None and limits.has("cpu") else requests
        assert where is not None
        raise where.invalid("cpu", "more than 0 CPUs")
    return float(amount)


def _amount(name, limits, requests, parse):  # noqa: ANN001, ANN202 - parse's type varies
    """``name``'s quantity from limits, else from requests, read by ``parse``."""
    for side in (limits, requests):
        if side is not None and side.has(name):
            try:
                amount = parse(side.raw(name))
            except ValueError as problem:
                raise side.invalid(name, str(problem)) from None
            if side is limits and requests is not None:
                requests.ignore(name, f"gpupool reserves the limit of {name}, not the request")
            return amount
    return None


# -- volumes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Mounted:
    """A volume mount as read: its claim's mount, or None (the sandbox's own /tmp, or the
    /dev/shm size)."""

    path: tuple[str | int, ...]
    mount: Mount | None


def _volume_name(volume: At) -> str:
    name = volume.text("name")
    if not name:
        raise volume.invalid("name", "the volume's name")
    return name


def _mounts(container: At, volumes: Mapping[str, At]) -> tuple[dict[str, _Mounted], int | None]:
    """Each volume the container mounts, by name, and /dev/shm's size (sizeLimit of an
    emptyDir of medium Memory mounted there)."""
    mounted: dict[str, _Mounted] = {}
    shm: int | None = None
    for item in container.maps("volumeMounts"):
        name, path = item.text("name"), item.text("mountPath")
        if not name or not path or name not in volumes:
            raise item.invalid("name", "a volume of the pod's volumes, and mountPath")
        volume = volumes[name]
        _mount_fields(item)
        if volume.has("persistentVolumeClaim"):
            mounted[name] = _Mounted(volume.path, _claim(volume, item, path))
        elif volume.has("emptyDir"):
            size = _empty_dir(volume, path)
            shm = size if path == SHM else shm
            mounted[name] = _Mounted(volume.path, None)
        else:
            raise _unsupported(volume)
    return mounted, shm


def _mount_fields(item: At) -> None:
    for key in ("subPath", "subPathExpr"):
        item.refuse(
            key,
            KubeflowNotSupported,
            "gpupool mounts a whole volume or dataset: mount it whole and use the path inside it",
        )
    item.ignore("mountPropagation", SANDBOX)


def _claim(volume: At, item: At, path: str) -> Mount:
    claim = volume.map("persistentVolumeClaim")
    assert claim is not None
    name = claim.text("claimName")
    if not name:
        raise claim.invalid("claimName", "the claim's name: a gpupool volume or dataset")
    read_only = bool(claim.flag("readOnly")) or bool(item.flag("readOnly"))
    return Mount(claim=name, path=path, read_only=read_only, field=claim.where("claimName"))


def _empty_dir(volume: At, path: str) -> int | None:
    """/dev/shm's size for an emptyDir of medium Memory there; None for one at /tmp."""
    empty = volume.map("emptyDir")
    assert empty is not None
    medium = empty.text("medium") or ""
    size = empty.raw("sizeLimit")
    if path == SHM and medium == "Memory":
        try:
            return None if size is None else byte_count(size)
        except ValueError as problem:
            raise empty.invalid("sizeLimit", str(problem)) from None
    if path.rstrip("/") == SCRATCH:
        volume.fields.notice(volume.path, "a job's sandbox has its own /tmp, kept to itself")
        return None
    raise volume.error(
        "emptyDir",
        KubeflowNotSupported,
        f"gpupool has scratch space at {SCRATCH} (and /dev/shm for an emptyDir of medium "
        f"Memory), not at {path}: mount it there, or use a gpupool volume (a "
        "persistentVolumeClaim of its name)",
    )


def _unsupported(volume: At) -> KubeflowNotSupported:
    kinds = [k for k in volume.value if k != "name"] or ["(none)"]
    error = volume.error(
        kinds[0],
        KubeflowNotSupported,
        f"a volume of kind {kinds[0]} has no gpupool equivalent: use a persistentVolumeClaim "
        "named as a gpupool volume or dataset of the team, an emptyDir of medium Memory at "
        "/dev/shm, or an emptyDir at /tmp",
    )
    assert isinstance(error, KubeflowNotSupported)
    return error
