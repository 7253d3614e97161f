"""A manifest's metadata and run policy as the job's name, team, priority, limits and hold.

``metadata.name`` is the job's name; the Kueue queue label (``kueue.x-k8s.io/queue-name``,
or ``runPolicy.schedulingPolicy.queue``, Volcano's) its team; a priority class (Kueue's
label, ``schedulingPolicy.priorityClass``, the pod's ``priorityClassName``) its priority
through the site's map; ``activeDeadlineSeconds`` its max runtime, ``backoffLimit`` its
retries, ``suspend`` submits it held. ``minAvailable`` below the replicas asks for elastic
training, which gpupool refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpupool.domain.jobs import MAX_RUNTIME_SECONDS
from gpupool.errors import ElasticNotSupported, UnknownPriorityClass
from gpupool.services.kubeflow._fields import At

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MAX_RETRIES = 100
NAMESPACE = (
    "gpupool has no namespaces: the job goes to the team its queue label "
    f"({QUEUE_LABEL}) names, else to your only team"
)
LABELS = f"labels other than {QUEUE_LABEL} and {PRIORITY_LABEL} mean nothing to gpupool"
ANNOTATIONS = "annotations mean nothing to gpupool"
CLEANUP = "gpupool stops every process of a job when it ends, and keeps its record and logs"
TTL = "gpupool keeps an ended job's record and logs (gpupool ls shows them)"
MANAGED = "gpupool runs the job itself"
GANG = "gpupool starts a job's nodes together or not at all (a gang), always"
MIN_RESOURCES = "gpupool checks what every node asks for"
TIMEOUT = "a gang waits in the queue until all its nodes fit"


@dataclass(frozen=True)
class Policy:
    """What a manifest says of the job as a whole. Each of ``teams`` and ``classes`` is
    (field, value): where it was written, for messages."""

    name: str | None = None
    teams: tuple[tuple[str, str], ...] = ()
    classes: tuple[tuple[str, str], ...] = ()
    max_runtime: float | None = None
    retries: int | None = None
    hold: bool = False

    def with_class(self, field: str, name: str | None) -> Policy:
        return self if not name else replace(self, classes=(*self.classes, (field, name)))


def read_metadata(root: At) -> Policy:
    """The job's name, and the team and priority class its labels give."""
    metadata = root.map("metadata")
    if metadata is None:
        return Policy()
    name = metadata.text("name") or metadata.text("generateName")
    metadata.ignore("namespace", NAMESPACE)
    metadata.ignore("annotations", ANNOTATIONS)
    policy = Policy(name=name)
    labels = metadata.map("labels")
    if labels is None:
        return policy
    queue, priority = labels.text(QUEUE_LABEL), labels.text(PRIORITY_LABEL)
    for key in labels.value:
        if key not in (QUEUE_LABEL, PRIORITY_LABEL):
            labels.ignore(key, LABELS)
    teams = ((labels.where(QUEUE_LABEL), queue),) if queue else ()
    return replace(policy, teams=teams).with_class(labels.where(PRIORITY_LABEL), priority)


def read_run_policy(run: At | None, policy: Policy) -> Policy:
    """``runPolicy`` (kubeflow.org/v1 and MPIJob's v2beta1) over ``policy``."""
    if run is None:
        return policy
    run.ignore("cleanPodPolicy", CLEANUP)
    run.ignore("ttlSecondsAfterFinished", TTL)
    run.ignore("managedBy", MANAGED)
    policy = read_limits(run, policy)
    scheduling = run.map("schedulingPolicy")
    return policy if scheduling is None else _scheduling(scheduling, policy)


def read_limits(at: At, policy: Policy) -> Policy:
    """``activeDeadlineSeconds``, ``backoffLimit`` and ``suspend`` where ``at`` holds them
    (a run policy; a TrainJob's spec holds the first and the last)."""
    deadline = at.number("activeDeadlineSeconds", least=1)
    if deadline is not None and deadline > MAX_RUNTIME_SECONDS:
        at.fields.notice(
            (*at.path, "activeDeadlineSeconds"),
            f"gpupool's longest max runtime is {MAX_RUNTIME_SECONDS:.0f} seconds: the job "
            "stops then",
        )
        deadline = int(MAX_RUNTIME_SECONDS)
    retries = at.number("backoffLimit") if "backoffLimit" in at.value else None
    if retries is not None and retries > MAX_RETRIES:
        at.fields.notice(
            (*at.path, "backoffLimit"), f"gpupool requeues a job at most {MAX_RETRIES} times"
        )
        retries = MAX_RETRIES
    return replace(
        policy,
        max_runtime=None if deadline is None else float(deadline),
        retries=retries,
        hold=bool(at.flag("suspend")),
    )


def _scheduling(scheduling: At, policy: Policy) -> Policy:
    scheduling.raw("minAvailable")  # checked against the nodes: check_min_available
    scheduling.ignore("minResources", MIN_RESOURCES)
    scheduling.ignore("scheduleTimeoutSeconds", TIMEOUT)
    queue = scheduling.text("queue")
    if queue:
        policy = replace(policy, teams=(*policy.teams, (scheduling.where("queue"), queue)))
    return policy.with_class(scheduling.where("priorityClass"), scheduling.text("priorityClass"))


def check_min_available(run: At | None, nodes: int) -> None:
    """``schedulingPolicy.minAvailable`` below the job's nodes asks to start with fewer:
    elastic training."""
    scheduling = run.map("schedulingPolicy") if run is not None else None
    least = scheduling.number("minAvailable") if scheduling is not None else None
    if scheduling is not None and least is not None and least < nodes:
        raise scheduling.error(
            "minAvailable",
            ElasticNotSupported,
            f"minAvailable {least} is below the job's {nodes} nodes: gpupool starts all of a "
            "job's nodes together; leave minAvailable out or give the replicas' total",
        )


def team_of(policy: Policy, root: At) -> str | None:
    """The one team the manifest names, or None; KubeflowInvalid when it names two."""
    names = {team for _, team in policy.teams}
    if len(names) > 1:
        field = policy.teams[1][0]
        shown = " and ".join(sorted(names))
        raise root.invalid(field, f"one queue: the manifest names {shown}")
    return next(iter(names), None)


def priority_of(policy: Policy, classes: Mapping[str, int], root: At) -> int | None:
    """The priority the site maps the manifest's priority class to; None without one."""
    names = {name for _, name in policy.classes}
    if len(names) > 1:
        shown = " and ".join(sorted(names))
        raise root.invalid(policy.classes[1][0], f"one priority class, not {shown}")
    if not names:
        return None
    field, name = policy.classes[0]
    if name not in classes:
        known = ", ".join(sorted(classes)) or "none: an admin sets GPUPOOL_PRIORITY_CLASSES"
        message = f"{field}: priority class '{name}' is not one this site maps (it maps {known})"
        raise UnknownPriorityClass(message, fields=[{"field": field, "message": "unknown"}])
    return classes[name]
