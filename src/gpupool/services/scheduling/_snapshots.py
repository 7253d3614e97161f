"""Building the scheduler's snapshot from the database, cheaply enough to do many times a second.

Pending jobs, running jobs' facts, node inventories and quotas change rarely compared with
how often the control loop asks, so each is parsed once and kept: a pass reads only the ids
of pending jobs, the placements and current attempts of active ones, and the nodes'
inventory stamps. Quotas and users' weights are read again at most every second (at once
after a change), and decayed usage every few seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from gpupool.domain import locality
from gpupool.domain.jobs import JobStatus, ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.scheduler.gittins import ServiceDistribution
from gpupool.scheduler.types import (
    Allocation,
    GpuShare,
    NodeCapacity,
    Nomination,
    PendingJob,
    Placement,
    Snapshot,
    TeamQuota,
    Want,
)
from gpupool.services import cluster as cluster_service
from gpupool.services import identity
from gpupool.services.identity import team_quotas
from gpupool.services.scheduling._usage import UsageTracker
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import (
    AttemptModel,
    DatasetVersionModel,
    EnvironmentVersionModel,
    ImageModel,
    JobArrayModel,
    JobModel,
    NodeModel,
    TeamModel,
    UserModel,
)

DEFAULT_HALF_LIFE = Settings.model_fields["fair_share_half_life_seconds"].default
# how long a node counts as holding what a job placed there fetches, before the node says so
# itself (a fetch that failed, or a report lost, misleads placement this long at most)
EXPECT_SECONDS = 600.0


SERVICE_SAMPLES = 10_000  # finished jobs whose service the Gittins order is drawn from
SERVICE_REFRESH_SECONDS = 60.0
FINISHED = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value)


class NodeCache:
    """Parsed node capacities, re-read only when a node's inventory stamp changes.

    Shared by the control loop and the API (submits check feasibility against it).
    """

    def __init__(self, max_age: float = 1.0) -> None:
        self._nodes: dict[str, tuple[tuple[float, bool, float | None], NodeCapacity]] = {}
        self._lock = threading.Lock()
        self.max_age = max_age
        self._checked_at = -max_age
        # node -> key -> when a job that fetches it was placed there: the node will hold it,
        # though it has not said so yet (its next report may come after the fetch)
        self._expected: dict[str, dict[str, float]] = {}

    def expect(self, node: str, keys: Iterable[str]) -> None:
        """``node`` will hold these (a job that fetches them was placed on it): placement
        counts them as held until the node says it holds them, or ``EXPECT_SECONDS``."""
        now = time.monotonic()
        with self._lock:
            self._expected.setdefault(node, {}).update(dict.fromkeys(keys, now))

    def recent(self, db: Database) -> tuple[NodeCapacity, ...]:
        """Capacities checked against the database at most ``max_age`` seconds ago.

        For the submit path, which needs them only to refuse requests no node could ever run.
        """
        if time.monotonic() - self._checked_at > self.max_age:
            with db.reader() as session:
                return self.capacities(session)
        with self._lock:
            return tuple(entry[1] for entry in self._nodes.values())

    def capacities(self, session: Session) -> tuple[NodeCapacity, ...]:
        rows = session.execute(  # a removed node is not in the pool: not even for feasibility
            select(
                NodeModel.name, NodeModel.discovered_at, NodeModel.schedulable, NodeModel.holds_at
            ).where(NodeModel.removed_at.is_(None))
        ).all()
        with self._lock:
            for name in self._nodes.keys() - {row.name for row in rows}:
                del self._nodes[name]
            for name, *stamp in rows:
                known = self._nodes.get(name)
                if known is None or known[0] != tuple(stamp):
                    node = cluster_service.get_node(session, name)
                    self._nodes[name] = (tuple(stamp), cluster_service.capacity(node))
            self._checked_at = time.monotonic()
            return tuple(self._with_expected(entry[1]) for entry in self._nodes.values())

    def reported(self, node: str) -> frozenset[str]:
        """What ``node`` said it holds, as last read (what placed jobs will fetch left out)."""
        with self._lock:
            entry = self._nodes.get(node)
        return entry[1].holds if entry is not None else frozenset()

    def _with_expected(self, node: NodeCapacity) -> NodeCapacity:
        expected = self._expected.get(node.name)
        if not expected:
            return node
        too_old = time.monotonic() - EXPECT_SECONDS
        for key in [k for k, at in expected.items() if k in node.holds or at < too_old]:
            del expected[key]
        return replace(node, holds=node.holds | expected.keys()) if expected else node


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the scheduler needs of a running job that never changes while it runs."""

    team: str
    user: str
    priority: int
    preemptible: bool
    max_runtime: float | None
    gpu_types: tuple[str, ...] = ()
    array_id: int | None = None


class SnapshotBuilder:
    """Keeps parsed pending jobs, running jobs' facts, quotas and usage between passes.

    A job is parsed again when it comes back to the queue: it left the pending set while it
    ran, and the control loop also ``forget``s it when an attempt ends, so a job requeued
    after preemption is read with its new ``attained`` and ``queued_at``.
    """

    def __init__(
        self,
        nodes: NodeCache | None = None,
        usage: UsageTracker | None = None,
        quota_max_age: float = 1.0,
        policy: Policy = DEFAULT_POLICY,
    ) -> None:
        self.policy = policy
        self._pending: dict[int, PendingJob] = {}
        self._facts: dict[int, JobFacts] = {}
        self._quotas: tuple[TeamQuota, ...] | None = None
        self._quotas_at = 0.0
        self._weights: Mapping[str, float] | None = None
        self._weights_at = 0.0
        # the finished jobs' service, for the Gittins order (read only while it is the order)
        self._service: ServiceDistribution | None = None
        self._service_at = 0.0
        # changes announced (``quotas_changed``, ``weights_changed``): what a build read after
        # one was announced during it (its transaction may predate the change) is not kept
        self._changes = 0
        self.quota_max_age = quota_max_age
        self.nodes = nodes or NodeCache()
        self.usage = usage or UsageTracker(DEFAULT_HALF_LIFE)

    @classmethod
    def of(cls, settings: Settings) -> SnapshotBuilder:
        half_life, refresh = settings.fair_share_half_life_seconds, settings.usage_refresh_seconds
        return cls(usage=UsageTracker(half_life, refresh), policy=settings.policy())

    def build(
        self,
        session: Session,
        now: float | None = None,
        nominations: Mapping[int, Nomination] | None = None,
    ) -> Snapshot:
        """A snapshot of now; ``nominations``: the GPUs being freed for preempting jobs (the
        previous cycle's ``Decisions.nominations``, which the control loop keeps)."""
        now = time.time() if now is None else now
        changes = self._changes  # before the first read of this build's transaction
        return Snapshot(
            nodes=self.nodes.capacities(session),
            allocations=self._allocations(session),
            pending=self._pending_jobs(session),
            quotas=self._team_quotas(session, changes),
            usage=self.usage.current(session, now),
            weights=self._user_weights(session, changes),
            policy=self.policy,
            nominations=dict(nominations or {}),
            service=self._service_seen(session) if self.policy.order == "gittins" else None,
        )

    def use_policy(self, policy: Policy) -> None:
        """Build with ``policy`` from the next build on (the live settings changed; an
        attribute's assignment, safe from another thread); usage decays by its half-life."""
        self.usage.set_half_life(policy.usage_half_life)
        self.policy = policy

    def quotas_changed(self) -> None:
        """Read the teams' quotas again at the next build (an admin changed one)."""
        self._changes += 1
        self._quotas = None

    def weights_changed(self) -> None:
        """Read the users' fair-share weights again at the next build (an admin changed one)."""
        self._changes += 1
        self._weights = None

    def pending_of(self, job_id: int) -> PendingJob | None:
        """The pending job as the last build read it (None: not pending then)."""
        return self._pending.get(job_id)

    def placed(self, placements: Iterable[Placement]) -> None:
        """These jobs were placed: their nodes will hold what they fetch (``NodeCache.expect``),
        so that the next pass's jobs that want the same follow them there."""
        for placement in placements:
            job = self._pending.get(placement.job_id)
            if job is not None and job.wants:
                self.nodes.expect(placement.node, (want.key for want in job.wants))

    def forget(self, job_id: int) -> None:
        """Read the job again when next seen (its attempt ended: it may come back requeued,
        with new ``attained`` and ``queued_at``)."""
        self._pending.pop(job_id, None)
        self._facts.pop(job_id, None)

    def _pending_jobs(self, session: Session) -> tuple[PendingJob, ...]:
        ids = set(
            session.scalars(
                select(JobModel.id).where(
                    JobModel.status == JobStatus.PENDING.value,
                    JobModel.cancel_requested_at.is_(None),
                    JobModel.waiting.is_(False),  # it waits for other jobs to end
                    JobModel.held.is_(False),  # held until released (services.jobs._holds)
                )
            )
        )
        for gone in self._pending.keys() - ids:
            del self._pending[gone]
        if new := ids - self._pending.keys():
            self._pending.update((job.job_id, job) for job in pending_jobs(session, new))
        return tuple(self._pending.values())

    def _allocations(self, session: Session) -> tuple[Allocation, ...]:
        rows = session.execute(ACTIVE_ROWS).all()
        for gone in self._facts.keys() - {row.id for row in rows}:
            del self._facts[gone]
        if new := {row.id for row in rows} - self._facts.keys():
            self._facts.update(job_facts(session, new))
        return tuple(
            allocation(row.id, task, self._facts[row.id], row)
            for row in rows
            if row.placement and row.id in self._facts
            for task in placement_tasks(row.placement)
        )

    def _service_seen(self, session: Session) -> ServiceDistribution:
        """The GPU-seconds the most recent ``SERVICE_SAMPLES`` finished jobs received, read
        again at most every ``SERVICE_REFRESH_SECONDS`` (the same object between: a cycle may
        keep the order it gave)."""
        checked = time.monotonic()
        if self._service is None or checked - self._service_at >= SERVICE_REFRESH_SECONDS:
            ran = func.sum(AttemptModel.ended_at - AttemptModel.started_at)
            rows = session.scalars(
                select(JobModel.gpus * ran)
                .join(AttemptModel, AttemptModel.job_id == JobModel.id)
                .where(
                    JobModel.status.in_(FINISHED),
                    JobModel.gpus > 0,
                    AttemptModel.started_at.is_not(None),
                    AttemptModel.ended_at.is_not(None),
                )
                .group_by(JobModel.id, JobModel.gpus, JobModel.ended_at)
                .order_by(JobModel.ended_at.desc())
                .limit(SERVICE_SAMPLES)
            )
            self._service, self._service_at = ServiceDistribution.of(rows), checked
        return self._service

    def _user_weights(self, session: Session, changes: int) -> Mapping[str, float]:
        # read as often as quotas: both change only when an admin says so
        weights = self._weights
        if weights is None or time.monotonic() - self._weights_at > self.quota_max_age:
            weights = MappingProxyType(identity.user_weights(session))
            if changes == self._changes:
                self._weights, self._weights_at = weights, time.monotonic()
        return weights

    def _team_quotas(self, session: Session, changes: int) -> tuple[TeamQuota, ...]:
        quotas = self._quotas
        if quotas is None or time.monotonic() - self._quotas_at > self.quota_max_age:
            quotas = team_quotas(session)
            if changes == self._changes:
                self._quotas, self._quotas_at = quotas, time.monotonic()
        return quotas


def pending_jobs(session: Session, ids: set[int]) -> list[PendingJob]:
    rows = session.execute(
        select(
            JobModel.id,
            TeamModel.name.label("team"),
            UserModel.name.label("user"),
            JobModel.priority,
            JobModel.submitted_at,
            JobModel.spec,
            JobModel.preemptible,
            JobModel.attained,
            JobModel.queued_at,
            JobModel.array_id,
            JobArrayModel.max_running.label("array_limit"),
        )
        .join(TeamModel, TeamModel.id == JobModel.team_id)
        .join(UserModel, UserModel.id == JobModel.user_id)
        .outerjoin(JobArrayModel, JobArrayModel.id == JobModel.array_id)
        .where(JobModel.id.in_(ids))
    ).all()
    sizes = want_sizes(session, [row.spec for row in rows])
    return [pending_job(row, sizes) for row in rows]


def want_sizes(session: Session, specs: list[dict[str, Any]]) -> dict[str, int]:
    """The bytes of each thing these jobs fetch onto their nodes (``domain.locality`` keys):
    a dataset version's and an image's as recorded, an environment's as a node that built it
    said; a registered prefix (on every node already) is left out."""
    keys = {key for spec in specs for key, _ in locality.wants_of(spec)}
    if not keys:
        return {}
    sizes = dict.fromkeys(keys, 0)
    manifests = [k.partition(":")[2] for k in keys if k.startswith(locality.DATASET)]
    if manifests:
        found = select(DatasetVersionModel.manifest, DatasetVersionModel.size_bytes)
        for manifest, size in session.execute(
            found.where(DatasetVersionModel.manifest.in_(manifests))
        ):
            sizes[locality.dataset_key(manifest)] = size
    digests = [k.partition(":")[2] for k in keys if k.startswith(locality.IMAGE)]
    if digests:
        found = select(ImageModel.digest, ImageModel.size_bytes)
        for digest, size in session.execute(found.where(ImageModel.digest.in_(digests))):
            sizes[locality.image_key(digest)] = size
    envs = [k.partition(":")[2] for k in keys if k.startswith(locality.ENV)]
    if envs:
        found = select(EnvironmentVersionModel.env).where(
            EnvironmentVersionModel.env.in_(envs), EnvironmentVersionModel.prefix.is_not(None)
        )
        for env in session.scalars(found):
            del sizes[locality.env_key(env)]
        for held in session.scalars(select(NodeModel.holds).where(NodeModel.holds.is_not(None))):
            for key, size in held.items():
                if key in sizes and key.startswith(locality.ENV):
                    sizes[key] = max(sizes[key], int(size))
    return sizes


def pending_job(row: Row, sizes: Mapping[str, int] | None = None) -> PendingJob:
    """The scheduler's view of a pending job's row; ``sizes``: the bytes of what it fetches
    (``want_sizes``), a thing missing there is not wanted (a registered prefix)."""
    spec = row.spec
    sizes = sizes or {}
    wants = tuple(Want(key, sizes[key]) for key, _ in locality.wants_of(spec) if key in sizes)
    return PendingJob(
        job_id=row.id,
        team=row.team,
        user=row.user,
        priority=row.priority,
        submitted_at=row.submitted_at,
        request=_request(spec),
        preemptible=row.preemptible,
        gpu_types=tuple(spec.get("gpu_types") or ()),
        max_runtime=spec.get("max_runtime_seconds"),
        attained=row.attained or 0.0,
        queued_at=row.queued_at,
        array_id=row.array_id,
        array_limit=row.array_limit,
        tasks=spec.get("nodes") or 1,
        distinct_nodes=(spec.get("nodes") or 1) > 1,
        one_fabric=(spec.get("nodes") or 1) > 1 and not spec.get("allow_cross_fabric"),
        wants=wants,
    )


# The current attempt of each starting or running job: one row per job.
ACTIVE_ROWS = (
    select(
        JobModel.id,
        JobModel.placement,
        JobModel.attained,
        JobModel.checkpoint_at,
        JobModel.cancel_requested_at,
        JobModel.standing,
        AttemptModel.started_at,
        AttemptModel.created_at,
        AttemptModel.stop_reason,
    )
    .join(
        AttemptModel,
        (AttemptModel.job_id == JobModel.id) & (AttemptModel.number == JobModel.attempts),
    )
    .where(JobModel.status.in_(cluster_service.ACTIVE))
)


def job_facts(session: Session, ids: set[int]) -> dict[int, JobFacts]:
    rows = session.execute(
        select(
            JobModel.id,
            TeamModel.name,
            UserModel.name,
            JobModel.priority,
            JobModel.preemptible,
            JobModel.spec,
            JobModel.array_id,
        )
        .join(TeamModel, TeamModel.id == JobModel.team_id)
        .join(UserModel, UserModel.id == JobModel.user_id)
        .where(JobModel.id.in_(ids))
    )
    return {
        job_id: JobFacts(
            team,
            user,
            priority,
            preemptible,
            spec.get("max_runtime_seconds"),
            tuple(spec.get("gpu_types") or ()),
            array_id,
        )
        for job_id, team, user, priority, preemptible, spec, array_id in rows
    }


def allocation(
    job_id: int, data: dict[str, Any], facts: JobFacts | None = None, row: Row | None = None
) -> Allocation:
    """What a job holds; with its facts and attempt row, what the policy needs of it too."""
    base = Allocation(
        job_id=job_id,
        node=data["node"],
        gpus=tuple(GpuShare(g["uuid"], g["share"], g["memory_bytes"]) for g in data["gpus"]),
        cpus=data["cpus"],
        memory_bytes=data["memory_bytes"],
    )
    if facts is None or row is None:
        return base
    return replace(
        base,
        team=facts.team,
        user=facts.user,
        priority=facts.priority,
        preemptible=facts.preemptible,
        started_at=row.started_at or row.created_at,
        attained=row.attained or 0.0,
        checkpoint_at=row.checkpoint_at,
        max_runtime=facts.max_runtime,
        gpu_types=facts.gpu_types,
        array_id=facts.array_id,
        stopping=row.stop_reason is not None or row.cancel_requested_at is not None,
        standing=row.standing,
    )


def placement_tasks(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The placement of each task of a job, from its stored placement (a job over several
    nodes keeps them under "tasks"; its first task's is also at the top, as one task's)."""
    return data.get("tasks") or [data]


def gang_json(placements: list[Placement]) -> dict[str, Any]:
    """The stored placement of a job: its first task's, and every task's under "tasks"."""
    first = placement_json(placements[0])
    if len(placements) == 1:
        return first
    return first | {"tasks": [placement_json(p) | {"task": p.task} for p in placements]}


def placement_json(placement: Placement) -> dict[str, Any]:
    return {
        "node": placement.node,
        "gpus": [
            {"uuid": g.uuid, "share": g.share, "memory_bytes": g.memory_bytes}
            for g in placement.gpus
        ],
        "cpus": placement.cpus,
        "memory_bytes": placement.memory_bytes,
    } | ({"held": list(placement.held)} if placement.held else {})


def build_snapshot(session: Session, now: float | None = None) -> Snapshot:
    """A snapshot built from scratch (for one-off uses: tests, the ETA predictor later)."""
    return SnapshotBuilder().build(session, now)


def _request(spec: dict[str, Any]) -> ResourceRequest:
    return ResourceRequest.model_validate(spec["resources"])
