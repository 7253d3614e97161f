"""Launch: the scheduler's placements claimed, launched, and their failures recorded.

Load and claim, in one transaction: each placed job moves from pending to starting by a
conditional update (still pending, no cancel asked for), and the attempts of all the jobs it
claimed are inserted with one statement, their events with another — the attempt is
recorded durably before it is launched (at most once). Launch, outside any transaction:
one after the other on this machine, side by side on a pool. Apply: the launched attempts
join the active table; failed launches are recorded in one transaction, and kept to be
recorded by the next pass if that fails. The launch itself is recorded with the attempt's
next transition; a crash before that is covered by ``Executor.recover`` at re-adoption.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select

from gpupool.domain import locality
from gpupool.domain.deployments import REPLICA_TOKEN_ENV
from gpupool.domain.jobs import JobSpec, JobStatus, Reason
from gpupool.domain.notebooks import token_env as notebook_token_env
from gpupool.executors.base import Executor, Handle, LaunchError
from gpupool.executors.task import GpuGrant, TaskSpec
from gpupool.loops.active import ActiveAttempt, ActiveAttempts
from gpupool.scheduler.types import Clock, Placement
from gpupool.services import jobs as job_service
from gpupool.services.cluster import node_addresses
from gpupool.services.core import LoopStats
from gpupool.services.scheduling import gang_json
from gpupool.store.db import Database
from gpupool.store.models import (
    AttemptModel,
    DeploymentReplicaModel,
    EventModel,
    JobArrayModel,
    JobModel,
    NotebookModel,
    UserModel,
)

log = logging.getLogger(__name__)

PARALLEL_LAUNCHES = 16  # launches in flight at once on a pool (nodes' agents answer in parallel)
# launches that failed through no fault of the job: it goes back to the queue
REQUEUED_LAUNCHES = frozenset({"storage_full", "node_unreachable"})

JOBS = JobModel.__table__
ATTEMPTS = AttemptModel.__table__
EVENTS = EventModel.__table__
# A job is claimed only while it is pending, not held and no cancel was asked for: built
# once, run per job with its values (a job's claim returns what its attempt and task are made
# of).
CLAIM = (
    JOBS.update()
    .where(
        JOBS.c.id == bindparam("job"),
        JOBS.c.status == JobStatus.PENDING.value,
        JOBS.c.cancel_requested_at.is_(None),
        JOBS.c.held.is_(False),  # held since the snapshot that placed it: it stays pending
    )
    .values(
        status=JobStatus.STARTING.value,
        attempts=JOBS.c.attempts + 1,
        node=bindparam("to_node"),
        placement=bindparam("to_placement", type_=JOBS.c.placement.type),
        reason=Reason.PLACED.value,
        message=bindparam("said"),
    )
    .returning(
        JOBS.c.attempts,
        JOBS.c.spec,
        JOBS.c.user_id,
        JOBS.c.array_id,
        JOBS.c.array_index,
        JOBS.c.platform_env,
    )
)


@dataclass(frozen=True)
class Claimed:
    """An attempt recorded for a job's placements, ready to launch: one task per placement
    (several for a job over several nodes, launched together)."""

    attempt_id: int
    tasks: list[TaskSpec]
    max_runtime: float | None

    @property
    def task(self) -> TaskSpec:
        return self.tasks[0]

    @property
    def gang(self) -> bool:
        return self.task.in_gang


@dataclass(frozen=True)
class TaskMaker:
    """What a job's task is launched with besides its spec: the server's log limit and
    default grace period, and where code snapshots and model archives are kept."""

    log_limit_bytes: int
    default_grace: float
    code_archive: Callable[[str], Path]
    model_archive: Callable[[str], Path]
    # a job's recorded environment (NAME@sha256:<hex>) -> what its task carries to the node
    environment: Callable[[str], dict[str, Any]] | None = None
    # the dataset store (where a node reads the blobs of the datasets a job reads)
    datasets_store: Path | None = None
    # the S3-compatible dataset store (endpoint, bucket, prefix, region; no credentials:
    # each node has its own) when it keeps the blobs instead: the node fetches them
    datasets_s3: dict[str, str] | None = None
    # the teams' volumes (where a node finds a volume's directory: on a pool, a shared path)
    volumes_store: Path | None = None

    # a container image's digest -> where the server keeps it (an OCI layout)
    image_layout: Callable[[str], Path] | None = None

    def grace(self, spec: JobSpec) -> float:
        """The job's own grace period, else the server's."""
        if spec.grace_period_seconds is not None:
            return spec.grace_period_seconds
        return self.default_grace

    def task(self, job_id: int, number: int, spec: JobSpec, placement: Placement) -> TaskSpec:
        return TaskSpec(
            job_id=job_id,
            attempt=number,
            node=placement.node,
            command=spec.command,
            env=spec.env,
            workdir=spec.workdir,
            gpu_uuids=[gpu.uuid for gpu in placement.gpus],
            log_limit_bytes=self.log_limit_bytes,
            stop_grace_seconds=self.grace(spec),
            cpus=spec.resources.cpus,
            memory_bytes=spec.resources.memory_bytes,
            pids=spec.resources.pids,
            gpu_grants=tuple(GpuGrant(g.uuid, g.share, g.memory_bytes) for g in placement.gpus),
            code=spec.code,
            code_archive=str(self.code_archive(spec.code)) if spec.code else None,
            listen=spec.listen,
            network=spec.network_mode,
            workspace=spec.workspace,
            model=spec.model,
            model_archive=str(self.model_archive(spec.model)) if spec.model else None,
            image=self.image_of(spec.image_digest) if spec.image_digest else None,
            environment=self.environment_of(spec.environment) if spec.environment else None,
            datasets=self.datasets_of(spec),
            volumes=self.volumes_of(spec),
            shm_bytes=spec.shm_bytes,
        )

    def image_of(self, digest: str) -> dict[str, Any]:
        """What the node needs of the job's image (``TaskSpec.image``)."""
        layout = str(self.image_layout(digest)) if self.image_layout is not None else ""
        return {"digest": digest, "layout": layout}

    def datasets_of(self, spec: JobSpec) -> tuple[dict[str, Any], ...]:
        """What the node needs of each dataset the job reads (``TaskSpec.datasets``)."""
        store = str(self.datasets_store or "")
        s3 = {"s3": dict(self.datasets_s3)} if self.datasets_s3 else {}
        return tuple(
            {
                **use.model_dump(include={"name", "version", "mount", "manifest"}),
                "store": store,
                **s3,
            }
            for use in spec.datasets
        )

    def volumes_of(self, spec: JobSpec) -> tuple[dict[str, Any], ...]:
        """What the node needs of each volume the job mounts (``TaskSpec.volumes``): with
        the volumes' ``store``, so that every node uses the one directory of a volume."""
        store = {"store": str(self.volumes_store)} if self.volumes_store is not None else {}
        return tuple({**use.model_dump(), **store} for use in spec.volumes)

    def environment_of(self, ref: str) -> dict[str, Any]:
        """What the node needs of the job's environment; ``error`` when it cannot be had
        (removed since the submit: the executor refuses the launch with it)."""
        name, _, found = ref.partition("@")
        if self.environment is None:
            return {"id": found, "name": name, "error": "this server has no environments"}
        try:
            return self.environment(ref)
        except LookupError as e:
            return {"id": found, "name": name, "error": str(e.args[0])}


@dataclass(frozen=True)
class _Won:
    """A job this pass's claim moved to starting, and what its row said."""

    group: list[Placement]
    number: int
    spec: JobSpec
    user_id: int
    array_id: int | None
    array_index: int | None
    held: str = ""  # what its nodes held of what it fetches (``domain.locality.held_note``)
    platform_env: dict[str, str] = field(default_factory=dict)  # ``JobModel.platform_env``


class Launch:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        executor: Executor,
        actives: ActiveAttempts,
        stats: LoopStats,
        tasks: TaskMaker,
    ) -> None:
        self.db, self.clock, self.executor = db, clock, executor
        self.actives, self.stats, self.tasks = actives, stats, tasks
        # launches that failed and whose failure is not recorded yet (a commit failed)
        self._failed: list[tuple[int, TaskSpec, LaunchError]] = []

    def run(self, placements: list[Placement]) -> None:
        """Record every attempt durably in one transaction, then launch them (at most once)."""
        failed = []
        fabrics: list[tuple[int, str | None]] = []
        claimed_all = self.claim(placements)
        for claimed, launched in self._launch_all(claimed_all):
            task = claimed.task
            if isinstance(launched, LaunchError):
                log.warning("launch of job %s failed: %s", task.job_id, launched)
                failed.append((claimed.attempt_id, task, launched))
                continue
            self.actives.add(
                ActiveAttempt(
                    claimed.attempt_id,
                    task.job_id,
                    task.attempt,
                    launched,
                    grace=task.stop_grace_seconds,
                    max_runtime=claimed.max_runtime,
                )
            )
            fabrics += [(task.job_id, t.get("fabric")) for t in launched.state.get("gang", [])]
        self.stats.started("launched", len(claimed_all) - len(failed))
        self.stats.started("launch_failed", len(failed))
        if failed:
            self._failed += failed
            self.record_failures()
        if [said for _, said in fabrics if said]:
            self._record_fabrics(fabrics)

    # -- claim, in one transaction -------------------------------------------------------------

    def claim(self, placements: list[Placement]) -> list[Claimed]:
        """Move each placed job to starting (guarded) and record its attempt and event."""
        now = self.clock.now()
        gangs: dict[int, list[Placement]] = {}
        for placement in placements:  # a job over several nodes: one placement per task
            gangs.setdefault(placement.job_id, []).append(placement)
        with self.db.session() as session:
            core = session.connection()  # Core statements: no ORM objects on this path
            won = [w for w in (self._claim_one(core, g) for g in gangs.values()) if w]
            if not won:
                return []
            ids = core.scalars(
                insert(ATTEMPTS).returning(ATTEMPTS.c.id, sort_by_parameter_order=True),
                [
                    {
                        "job_id": w.group[0].job_id,
                        "number": w.number,
                        "node": w.group[0].node,
                        "placement": gang_json(w.group),
                        "status": "starting",
                        "created_at": now,
                    }
                    for w in won
                ],
            ).all()
            core.execute(
                insert(EVENTS),
                [
                    {
                        "job_id": w.group[0].job_id,
                        "at": now,
                        "reason": Reason.PLACED.value,
                        "message": f"placed on {describe_all(w.group)}"
                        + (f"; {w.held}" if w.held else ""),
                    }
                    for w in won
                ],
            )
            return self._claimed(session, won, ids)

    def _claim_one(self, core: Connection, group: list[Placement]) -> _Won | None:
        placement = group[0]
        row = core.execute(
            CLAIM,
            {
                "job": placement.job_id,
                "to_node": placement.node,
                "to_placement": gang_json(group),
                "said": f"placed on {describe_all(group)}",
            },
        ).first()
        if row is None:  # cancelled, or no longer pending, since the snapshot
            return None
        number, data, user_id, array_id, array_index, platform_env = row
        held = "; ".join(note for p in group if (note := locality.held_note(data, p.node, p.held)))
        spec = JobSpec.stored(data)
        return _Won(group, number, spec, user_id, array_id, array_index, held, platform_env or {})

    def _claimed(self, session, won: list[_Won], ids: list[int]) -> list[Claimed]:  # noqa: ANN001
        """The tasks to launch: one query for the users, one for the arrays' sizes."""
        users = {
            user_id: (name, unix_user)
            for user_id, name, unix_user in session.execute(
                select(UserModel.id, UserModel.name, UserModel.unix_user).where(
                    UserModel.id.in_({w.user_id for w in won})
                )
            )
        }
        array_ids = {w.array_id for w in won if w.array_id is not None}
        sizes = (
            dict(
                session.execute(
                    select(JobArrayModel.id, JobArrayModel.size).where(
                        JobArrayModel.id.in_(array_ids)
                    )
                ).all()
            )
            if array_ids
            else {}
        )
        return [
            Claimed(
                attempt_id,
                self._tasks(session, w, users[w.user_id], sizes),
                w.spec.max_runtime_seconds,
            )
            for w, attempt_id in zip(won, ids, strict=True)
        ]

    def _tasks(
        self,
        session,  # noqa: ANN001
        won: _Won,
        user: tuple[str, str | None],
        sizes: dict[int, int],
    ) -> list[TaskSpec]:
        spec, group = won.spec, won.group
        wanted = spec.is_gang or spec.listen
        addresses = node_addresses(session, [p.node for p in group]) if wanted else {}
        extra_env: dict[str, str] = dict(won.platform_env)  # a trial's point, ...
        if won.array_id is not None:  # an array's task: which one (gpupool's names, not the job's)
            size = sizes[won.array_id]
            extra_env |= job_service.array_env(won.array_id, won.array_index, size)
        if spec.listen:  # a notebook's or replica's token: told to it, never in its spec
            extra_env |= secret_env(session, group[0].job_id)
        tasks = []
        for index, part in enumerate(group):
            changes: dict[str, Any] = {"user": user[0], "unix_user": user[1]}
            if spec.listen:  # where it serves: the address its node is reached at
                changes["node_address"] = addresses.get(part.node) or "127.0.0.1"
            if spec.is_gang:
                changes |= {
                    "task_index": index,
                    "task_count": len(group),
                    "node_address": addresses.get(part.node) or "127.0.0.1",
                    "gpu_indices": tuple(range(len(part.gpus))),
                    "launcher": spec.launcher,
                    "launcher_mode": spec.launcher_mode,
                    "procs_per_node": spec.procs_per_node,
                }
            task = replace(self.tasks.task(part.job_id, won.number, spec, part), **changes)
            if extra_env:
                task = replace(task, env={**task.env, **extra_env})
            tasks.append(task)
        return tasks

    # -- launch, outside any transaction -------------------------------------------------------

    def _launch_all(self, claimed: list[Claimed]) -> list[tuple[Claimed, Handle | LaunchError]]:
        """Launch each claimed attempt: one after the other on this machine (its fork server
        takes one at a time), side by side on a pool, where each launch waits for a node's
        agent to answer and nodes answer at once."""
        if len(claimed) < 2 or not self.executor.capabilities.multi_node:
            return [(one, self._launch(one)) for one in claimed]
        with ThreadPoolExecutor(max_workers=PARALLEL_LAUNCHES) as pool:
            return list(zip(claimed, pool.map(self._launch, claimed), strict=True))

    def _launch(self, claimed: Claimed) -> Handle | LaunchError:
        try:
            if claimed.gang:
                return self.executor.start_gang(claimed.tasks)
            return self.executor.start(claimed.task)
        except LaunchError as error:
            return error

    # -- what the launches said ----------------------------------------------------------------

    def record_failures(self) -> None:
        """Record failed launches; kept and tried again by the next pass if that fails."""
        if not self._failed:
            return
        now = self.clock.now()
        with self.db.session() as session:
            for attempt_id, task, error in self._failed:
                attempt = session.get(AttemptModel, attempt_id)
                attempt.status, attempt.ended_at = "launch_failed", now
                job = session.get(JobModel, task.job_id)
                if error.reason in REQUEUED_LAUNCHES:  # the job did nothing wrong: it waits
                    job_service.requeue(session, job, now, error.user_message)
                    continue
                job_service.finish(
                    session, job, JobStatus.FAILED, now, Reason.LAUNCH_FAILED, error.user_message
                )
        self._failed = []

    def _record_fabrics(self, fabrics: list[tuple[int, str | None]]) -> None:
        """What each task of a job over several nodes talks over (RDMA devices, or TCP at
        which speed): in the job's events, so that a slow fabric is never a surprise."""
        now = self.clock.now()
        with self.db.session() as session:
            for job_id, said in fabrics:
                if said:
                    job_service.record(session, job_id, now, Reason.FABRIC, said)


def secret_env(session, job_id: int) -> dict[str, str]:  # noqa: ANN001
    """What a workload is told that its job's spec never holds (the spec is shown to the
    job's team): the token a notebook's JupyterLab, or a deployment's replica, is started
    with."""
    token = session.scalar(select(NotebookModel.token).where(NotebookModel.job_id == job_id))
    if token:
        return notebook_token_env(token)
    replica = session.scalar(
        select(DeploymentReplicaModel.token).where(DeploymentReplicaModel.job_id == job_id)
    )
    return {REPLICA_TOKEN_ENV: replica} if replica else {}


def describe_all(placements: list[Placement]) -> str:
    """'n1: GPU-a; n2: GPU-b' for a job over several nodes."""
    return "; ".join(describe(placement) for placement in placements)


def describe(placement: Placement) -> str:
    if not placement.gpus:
        return f"{placement.node} (no GPU)"
    parts = [g.uuid if g.share >= 1 else f"{g.uuid} ({g.share:g} of it)" for g in placement.gpus]
    return f"{placement.node}: " + ", ".join(parts)
