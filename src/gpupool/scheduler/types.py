"""The scheduler's input (an immutable snapshot) and output (decisions).

The scheduler is a pure function of these values and an injected clock: the server loop,
the simulator, the ETA predictor and the benchmarks all build a ``Snapshot`` and call
``gpupool.scheduler.schedule``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.waiting import PendingReason
from gpupool.scheduler.gittins import ServiceDistribution

SHARE_EPSILON = 1e-9


class Clock(Protocol):
    def now(self) -> float: ...


@dataclass(frozen=True, slots=True)
class GpuCapacity:
    uuid: str
    index: int
    model: str
    memory_bytes: int
    domain: int = 0  # GPUs of one domain share NVLink or a PCIe switch (from the inventory)


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    name: str
    gpus: tuple[GpuCapacity, ...]
    cpus: float
    memory_bytes: int
    schedulable: bool = True
    drained: bool = False  # not schedulable because an admin drained it (else: it is down)
    fabric_group: str | None = None  # a job over several nodes keeps to one group
    # what the node already holds of what jobs fetch before they start (an environment, a
    # dataset version, an image), as ``Want.key``s: placement prefers a node that holds more
    holds: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class GpuShare:
    """Part of one GPU held by a task: compute share in (0, 1] and reserved memory."""

    uuid: str
    share: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one task of a starting or running job holds, and what the policy needs of it.

    ``started_at``: when this attempt started; ``attained``: GPU-seconds of service the job
    received in earlier attempts (least-attained-service ordering adds this attempt's).
    ``checkpoint_at``: when the job last reported a checkpoint (None: never; counts from
    ``started_at``). ``stopping``: a stop (preemption, cancel) was asked and not yet done.
    """

    job_id: int
    node: str
    gpus: tuple[GpuShare, ...]
    cpus: float
    memory_bytes: int
    team: str = ""
    user: str = ""
    priority: int = 0
    preemptible: bool = True
    started_at: float = 0.0
    attained: float = 0.0
    checkpoint_at: float | None = None
    max_runtime: float | None = None
    stopping: bool = False
    task: int = 0
    gpu_types: tuple[str, ...] = ()  # the GPU models its job asked for (empty: any)
    array_id: int | None = None  # the job array its job is a task of (None: none)
    # a trial's standing in its experiment at its last rung (1: first, towards 0: last):
    # among victims otherwise alike, the worst-ranked trials are preempted first (None: not
    # a trial, or not judged yet; counted as 1)
    standing: float | None = None


@dataclass(frozen=True, slots=True)
class Want:
    """Something a job fetches onto its node before it starts unless the node holds it
    already: ``key`` names it the way ``NodeCapacity.holds`` does (``env:<digest>``,
    ``dataset:<version digest>``, ``image:<manifest digest>``); ``size``: its bytes, the cost
    of fetching it (0 when unknown: it still counts, as the least cost)."""

    key: str
    size: int = 0


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to start. ``request`` is per task; a gang has ``tasks`` of them.

    ``gpu_types``: the GPU models it may run on (empty: any). ``attained``: GPU-seconds of
    service received in earlier attempts (a preempted job keeps its history).
    ``queued_at``: when it (re)entered the queue (None: ``submitted_at``).
    ``array_id``: the job array it is a task of (None: none); ``array_limit``: the most tasks
    of that array that may hold resources at once (sbatch's ``%N``; None: no limit).
    """

    job_id: int
    team: str
    user: str
    priority: int
    submitted_at: float
    request: ResourceRequest
    tasks: int = 1
    preemptible: bool = True
    gpu_types: tuple[str, ...] = ()
    max_runtime: float | None = None
    attained: float = 0.0
    queued_at: float | None = None
    array_id: int | None = None
    array_limit: int | None = None
    distinct_nodes: bool = False  # each task on a node of its own (a job over several nodes)
    one_fabric: bool = False  # its tasks' nodes are all of one fabric group
    wants: tuple[Want, ...] = ()  # fetched onto each of its nodes unless held (locality)

    def started(
        self, placements: list[Placement], now: float, attained: float | None = None
    ) -> tuple[Allocation, ...]:
        """What it holds once started at ``now`` on ``placements`` (one per task);
        ``attained``: its service so far when the caller tracks it (default: this job's)."""
        return tuple(
            Allocation(
                self.job_id,
                placement.node,
                placement.gpus,
                placement.cpus,
                placement.memory_bytes,
                team=self.team,
                user=self.user,
                priority=self.priority,
                preemptible=self.preemptible,
                started_at=now,
                attained=self.attained if attained is None else attained,
                max_runtime=self.max_runtime,
                task=placement.task,
                gpu_types=self.gpu_types,
                array_id=self.array_id,
            )
            for placement in placements
        )


ANY_MODEL = "*"


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """A team's guaranteed GPUs (by GPU model; ``"*"``: models not named) and its limit.

    ``guarantee`` maps a model (or ``"*"``) to GPUs; ``limit``: the most GPUs the team may
    hold at once, borrowed ones included (None: no limit); ``weight``: its share of the
    capacity nobody is guaranteed, or that owners leave idle, relative to other teams.
    """

    team: str
    guarantee: Mapping[str, float] = field(default_factory=dict)
    limit: float | None = None
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle decides from.

    ``quotas``: per team (a team without one has no guarantee and no limit).
    ``usage``: decayed past GPU-seconds per user (fair share inside a team);
    ``weights``: per user (default 1). ``remaining``: the oracle's knowledge of each job's
    remaining work, for the ``srtf`` reference policy of the simulator only. ``service``:
    the GPU-seconds the jobs finished so far received, for ``Policy.order`` "gittins" (None:
    none seen, every job of a level has index 0 and the level is first come, first served).
    """

    nodes: tuple[NodeCapacity, ...]
    allocations: tuple[Allocation, ...]
    pending: tuple[PendingJob, ...]
    quotas: tuple[TeamQuota, ...] = ()
    usage: Mapping[str, float] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    policy: Policy = DEFAULT_POLICY
    remaining: Mapping[int, float] = field(default_factory=dict)  # work left: "srtf" only
    nominations: Mapping[int, Nomination] = field(default_factory=dict)
    service: ServiceDistribution | None = None  # "gittins" only
    # work out reasons for the jobs left pending in this cycle (with ``Policy.explain``): the
    # server explains at most every ``explain_interval_seconds``, the cycles between decide only
    explain: bool = True


@dataclass(frozen=True, slots=True)
class Nomination:
    """The GPUs a pending job preempted others for, kept for it while they are freed.

    ``gpus``: per node, the indices of the GPUs (the victims' and those already free beside
    them) the job is to start on; ``at``: when the preemption was decided. While it stands no
    other job may take these GPUs once free, and the job preempts nobody else; it ends when
    the job starts or leaves the queue, when the GPUs can no longer serve it (a node left, or
    another job holds one), or ``NOMINATION_TTL`` seconds after ``at`` once no victim is
    still stopping.
    """

    job_id: int
    gpus: tuple[tuple[str, tuple[int, ...]], ...]
    at: float


NOMINATION_TTL = 900.0  # seconds a nomination stands at most once its victims have stopped


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one task of a job starts; a gang of ``n`` tasks gets ``n`` placements."""

    job_id: int
    node: str
    gpus: tuple[GpuShare, ...]
    cpus: float
    memory_bytes: int
    task: int = 0
    held: tuple[str, ...] = ()  # the job's wants that its node held already (``Want.key``)


@dataclass(frozen=True, slots=True)
class Preemption:
    """A running job to stop (SIGTERM, grace, SIGKILL) and requeue, and who it yields to."""

    job_id: int
    for_job: int
    code: Reason
    message: str


@dataclass(slots=True)
class Decisions:
    placements: list[Placement] = field(default_factory=list)
    pending: dict[int, PendingReason] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)
    # the nominations standing after this cycle (kept ones and new ones): the caller passes
    # them in the next snapshot
    nominations: dict[int, Nomination] = field(default_factory=dict)


HandOver = Callable[[Decisions], None]  # takes a cycle's decisions so far (``schedule``)


def model_matches(types: tuple[str, ...], model: str) -> bool:
    """A GPU model is allowed by ``types`` (empty: any): one of them names it (``names``)."""
    if not types:
        return True
    lowered = model.lower()
    return any(names(kind.lower(), lowered) for kind in types)


def names(kind: str, model: str) -> bool:
    """Whether ``kind`` names the GPU ``model`` (both in lower case): it is part of the
    model's name that does not run on into more of its own kind of characters (digits after
    its last digit, letters before its first letter, ...). So ``a100`` names ``nvidia
    a100-sxm4-80gb``, ``80gb`` names it too, ``v100`` names ``v100m16`` and ``a10`` names
    ``nvidia a10g``, but ``a10`` does not name an A100, nor ``h100`` a GH100."""
    if not kind:
        return True
    start = model.find(kind)
    while start >= 0:
        end = start + len(kind)
        before = model[start - 1] if start else ""
        after = model[end] if end < len(model) else ""
        if not _runs_on(before, kind[0]) and not _runs_on(kind[-1], after):
            return True
        start = model.find(kind, start + 1)
    return False


def _runs_on(one: str, other: str) -> bool:
    """Two characters side by side of one name: both digits, or both letters."""
    return bool(one and other) and (
        (one.isdigit() and other.isdigit()) or (one.isalpha() and other.isalpha())
    )
