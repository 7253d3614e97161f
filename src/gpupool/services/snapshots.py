"""Building the scheduler's snapshot from the database, cheaply enough to do many times a second.

Pending jobs and node inventories change rarely compared with how often the control loop
asks, so each is parsed once and kept: a pass reads only the ids of pending jobs, the
placements of active ones, and the nodes' inventory stamps.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobStatus, ResourceRequest
from gpupool.scheduler.types import (
    Allocation,
    GpuShare,
    NodeCapacity,
    PendingJob,
    Placement,
    Snapshot,
)
from gpupool.services import nodes as node_service
from gpupool.store.db import Database
from gpupool.store.models import JobModel, NodeModel, TeamModel, UserModel


class NodeCache:
    """Parsed node capacities, re-read only when a node's inventory stamp changes.

    Shared by the control loop and the API (submits check feasibility against it).
    """

    def __init__(self, max_age: float = 1.0) -> None:
        self._nodes: dict[str, tuple[float, bool, NodeCapacity]] = {}
        self._lock = threading.Lock()
        self.max_age = max_age
        self._checked_at = -max_age

    def recent(self, db: Database) -> tuple[NodeCapacity, ...]:
        """Capacities checked against the database at most ``max_age`` seconds ago.

        For the submit path, which needs them only to refuse requests no node could ever run.
        """
        if time.monotonic() - self._checked_at > self.max_age:
            with db.reader() as session:
                return self.capacities(session)
        with self._lock:
            return tuple(entry[2] for entry in self._nodes.values())

    def capacities(self, session: Session) -> tuple[NodeCapacity, ...]:
        rows = session.execute(
            select(NodeModel.name, NodeModel.discovered_at, NodeModel.schedulable)
        ).all()
        with self._lock:
            for name in self._nodes.keys() - {row.name for row in rows}:
                del self._nodes[name]
            for name, stamp, schedulable in rows:
                known = self._nodes.get(name)
                if known is None or known[:2] != (stamp, schedulable):
                    node = node_service.get_node(session, name)
                    self._nodes[name] = (stamp, schedulable, node_service.capacity(node))
            self._checked_at = time.monotonic()
            return tuple(entry[2] for entry in self._nodes.values())


class SnapshotBuilder:
    """Keeps parsed pending jobs (and node capacities) between passes of the control loop."""

    def __init__(self, nodes: NodeCache | None = None) -> None:
        self._pending: dict[int, PendingJob] = {}
        self.nodes = nodes or NodeCache()

    def build(self, session: Session) -> Snapshot:
        return Snapshot(
            nodes=self.nodes.capacities(session),
            allocations=active_allocations(session),
            pending=self._pending_jobs(session),
        )

    def _pending_jobs(self, session: Session) -> tuple[PendingJob, ...]:
        ids = set(
            session.scalars(
                select(JobModel.id).where(
                    JobModel.status == JobStatus.PENDING.value,
                    JobModel.cancel_requested_at.is_(None),
                )
            )
        )
        for gone in self._pending.keys() - ids:
            del self._pending[gone]
        if new := ids - self._pending.keys():
            self._pending.update((job.job_id, job) for job in pending_jobs(session, new))
        return tuple(self._pending.values())


def pending_jobs(session: Session, ids: set[int]) -> list[PendingJob]:
    rows = session.execute(
        select(
            JobModel.id,
            TeamModel.name,
            UserModel.name,
            JobModel.priority,
            JobModel.submitted_at,
            JobModel.spec,
        )
        .join(TeamModel, TeamModel.id == JobModel.team_id)
        .join(UserModel, UserModel.id == JobModel.user_id)
        .where(JobModel.id.in_(ids))
    )
    return [
        PendingJob(job_id, team, user, priority, submitted, _request(spec))
        for job_id, team, user, priority, submitted, spec in rows
    ]


def active_allocations(session: Session) -> tuple[Allocation, ...]:
    rows = session.execute(
        select(JobModel.id, JobModel.placement).where(JobModel.status.in_(node_service.ACTIVE))
    )
    return tuple(allocation(job_id, data) for job_id, data in rows if data)


def allocation(job_id: int, data: dict[str, Any]) -> Allocation:
    return Allocation(
        job_id=job_id,
        node=data["node"],
        gpus=tuple(GpuShare(g["uuid"], g["share"], g["memory_bytes"]) for g in data["gpus"]),
        cpus=data["cpus"],
        memory_bytes=data["memory_bytes"],
    )


def placement_json(placement: Placement) -> dict[str, Any]:
    return {
        "node": placement.node,
        "gpus": [
            {"uuid": g.uuid, "share": g.share, "memory_bytes": g.memory_bytes}
            for g in placement.gpus
        ],
        "cpus": placement.cpus,
        "memory_bytes": placement.memory_bytes,
    }


def build_snapshot(session: Session) -> Snapshot:
    """A snapshot built from scratch (for one-off uses: tests, the ETA predictor later)."""
    return SnapshotBuilder().build(session)


def _request(spec: dict[str, Any]) -> ResourceRequest:
    return ResourceRequest.model_validate(spec["resources"])
