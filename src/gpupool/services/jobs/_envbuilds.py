"""Environments built before their GPU jobs start: a CPU-only build job on the node, the job
waiting for it.

A job that asks for GPUs, placed on a node that has not built its Python environment yet,
would hold its GPUs idle for the whole build (minutes for a large stack). Instead, when the
control loop is about to start it there, ``build_first`` (one transaction):

* finds the build of that environment on that node already under way (a job of kind
  ``envbuild`` of the same team, pending or active there), or makes one: a job of the
  waiting job's team and user, its environment, ``true`` for a command, at most
  ``env_build_cpus`` and ``env_build_memory_bytes``, no GPU. Its runner builds the
  environment as any job's does (``runner.envbuild``, sandboxed, under its owner's
  identity); ``gpupool logs`` shows the build, ``why`` its progress;
* makes the job wait for it (``afterany``: a failed build still lets the job start, and
  the job's own start says why the environment cannot be built), reason ``EnvBuilding``.

The loop launches the new build jobs at once in the placements the scheduler gave the
waiting jobs (CPU and memory only: less than those took), so they land on the node that
lacks the environment; the GPUs go to other jobs meanwhile. When the build ends, the job is
queued again and placement prefers the node that now holds its environment.

A job is sent to wait for a build once only: placed again without its environment there
(the node evicted it, or the build failed) it starts and builds it itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from gpupool.domain.dependencies import Condition, waiting_message
from gpupool.domain.jobs import JobKind, JobSpec, JobStatus, Reason, Role
from gpupool.services.core import Principal
from gpupool.services.jobs._jobs import new_job, record
from gpupool.store.models import JobDependencyModel, JobModel

ACTIVE = (JobStatus.PENDING.value, JobStatus.STARTING.value, JobStatus.RUNNING.value)
RECENT_SECONDS = 600.0  # a build that succeeded this recently on the node: the node holds it
TIME_OVER_LIMIT = 300.0  # a build job may run this much longer than a build may take


@dataclass(frozen=True)
class Lacking:
    """A node a job was placed on that lacks its environment, with what it was given there
    (a build job there takes no more)."""

    node: str
    cpus: float
    memory_bytes: int


@dataclass(frozen=True)
class BuildLimits:
    """What a build job may take at most, and how long a build may run (settings)."""

    cpus: float
    memory_bytes: int
    timeout_seconds: float


@dataclass(frozen=True)
class NewBuild:
    """A build job just made, to launch now on ``node`` with these resources."""

    job_id: int
    node: str
    cpus: float
    memory_bytes: int


def build_first(
    session: Session,
    lacking: Mapping[int, Sequence[Lacking]],
    limits: BuildLimits,
    now: float,
) -> tuple[set[int], list[NewBuild]]:
    """Make each job of ``lacking`` (job id -> the nodes it was placed on that lack its
    environment) wait for its environment's build there; the jobs that now wait, and the
    build jobs made (to launch). A job no longer pending, one that waited for a build
    before, or whose every node built it lately, is left out: it starts as placed."""
    waiting: set[int] = set()
    made: list[NewBuild] = []
    jobs = session.scalars(
        select(JobModel).where(
            JobModel.id.in_(list(lacking)),
            JobModel.status == JobStatus.PENDING.value,
            JobModel.waiting.is_(False),
            JobModel.cancel_requested_at.is_(None),
        )
    ).all()
    for job in sorted(jobs, key=lambda j: j.id):
        ref = (job.spec or {}).get("environment") or ""
        if "@sha256:" not in ref or _waited_before(session, job.id):
            continue
        builds = _builds(session, job.team_id, ref, now)
        found: list[tuple[int, str]] = []
        for node in lacking[job.id]:
            under_way = builds.get(node.node) or builds.get(None)
            if under_way is not None and under_way[1] == "built":
                continue  # built there lately: the node's next report will say so
            if under_way is None:
                build = _make(session, job, ref, node, limits, now)
                made.append(build)
                under_way = (build.job_id, "under way")
                builds[node.node] = under_way
            found.append((under_way[0], node.node))
        if found:
            _wait(session, job, ref, found, now)
            waiting.add(job.id)
    return waiting, made


def _waited_before(session: Session, job_id: int) -> bool:
    """Whether the job waited for a build once already."""
    build = (
        select(JobDependencyModel.depends_on_id)
        .join(JobModel, JobModel.id == JobDependencyModel.depends_on_id)
        .where(
            JobDependencyModel.job_id == job_id,
            JobModel.kind == JobKind.ENV_BUILD.value,
        )
    )
    return session.scalar(build.limit(1)) is not None


def _builds(
    session: Session, team_id: int, ref: str, now: float
) -> dict[str | None, tuple[int, str]]:
    """The team's builds of ``ref``'s environment by node (None: one not placed yet):
    (job id, "under way") for one pending or active, (job id, "built") for one that
    succeeded lately."""
    env_id = ref.partition("@")[2]
    rows = session.execute(
        select(JobModel.id, JobModel.node, JobModel.status, JobModel.ended_at, JobModel.spec)
        .where(
            JobModel.team_id == team_id,
            JobModel.kind == JobKind.ENV_BUILD.value,
            JobModel.status.in_((*ACTIVE, JobStatus.SUCCEEDED.value)),
        )
        .order_by(JobModel.id)
    ).all()
    found: dict[str | None, tuple[int, str]] = {}
    for job_id, node, status, ended_at, spec in rows:
        if ((spec or {}).get("environment") or "").partition("@")[2] != env_id:
            continue
        if status in ACTIVE:
            found[node if status != JobStatus.PENDING.value else None] = (job_id, "under way")
        elif ended_at is not None and ended_at > now - RECENT_SECONDS:
            found.setdefault(node, (job_id, "built"))
    return found


def _make(
    session: Session, job: JobModel, ref: str, node: Lacking, limits: BuildLimits, now: float
) -> NewBuild:
    """A build job of ``ref`` for ``node``: the job's team and user, no GPU."""
    cpus = min(limits.cpus, node.cpus)
    memory = min(limits.memory_bytes, node.memory_bytes) if node.memory_bytes else None
    name = ref.partition("@")[0]
    spec = JobSpec.model_validate(
        {
            "name": f"build environment {name} on {node.node}",
            "command": ["true"],
            "environment": ref,
            "resources": {"cpus": cpus, "memory_bytes": memory},
            "priority": job.priority,
            "max_runtime_seconds": int(limits.timeout_seconds + TIME_OVER_LIMIT),
        }
    )
    owner = Principal(job.user_id, job.user.name, Role.MEMBER, frozenset({job.team_id}))
    build = new_job(owner, job.team, spec, now, kind=JobKind.ENV_BUILD)
    session.add(build)
    session.flush()
    record(
        session,
        build.id,
        now,
        Reason.SUBMITTED,
        f"made by the server to build environment {name} on {node.node} for job {job.id}",
    )
    return NewBuild(build.id, node.node, cpus, memory or 0)


def _wait(
    session: Session, job: JobModel, ref: str, builds: list[tuple[int, str]], now: float
) -> None:
    """The job waits (``afterany``) for these builds: reason EnvBuilding."""
    session.execute(
        insert(JobDependencyModel),
        [
            {"job_id": job.id, "depends_on_id": build_id, "condition": Condition.AFTER_ANY.value}
            for build_id in dict.fromkeys(build_id for build_id, _ in builds)
        ],
    )
    first, node = builds[0]
    name = f"build environment {ref.partition('@')[0]} on {node}"
    job.waiting = True
    job.reason = Reason.ENV_BUILDING.value
    job.message = waiting_message(Condition.AFTER_ANY, first, name)
    record(session, job.id, now, Reason.ENV_BUILDING, job.message)
