"""Teams' storage: what each team's files take against its storage quota.

A team's files are (1) the directories of its jobs under the data directory's ``jobs``
(outputs, checkpoints, the code unpacked for them, logs), (2) the workspaces of the users who
keep notebooks in the team (a workspace counts for each team its user has notebooks in),
(3) the archives of its model versions, (4) the code archives its members uploaded (an
upload counts for each team of its uploader), (5) the dataset blobs it holds (a blob counts
for each team that uploaded it) and (6) its volumes' directories under the data
directory's ``volumes``. The database knows (3), (4) and (5); (1) and (2)
are summed as ``du`` counts them (blocks allocated, a file linked twice once) by the
storage pipeline (``gpupool.loops.storage``), every ``storage_scan_seconds``, in three steps
that hold no transaction across the walk: load the teams' files (``load_team_files``), walk
them (``StorageScan``), record (``record_usage``). A finished job's directory no
longer changes: it is walked once and its size kept by the watch. On a pool, (1) and (2)
are also on the nodes that ran the jobs: each node's agent walks its own disk when asked
(``executors.usage``), and a node that does not answer counts as it did last.

The watch records each team's usage on its row (``storage_used``), so that the API shows it
without walking anything. A team past its quota has its running jobs stopped
(``StorageQuotaExceeded``) at the scan that finds it there; the server's own writes for the
team (model registration, code uploads) are refused while the recorded usage is over
(``quotas.refuse_over_storage``). Each volume's bytes are recorded on its row too; the jobs
that mount a volume over its ``--size`` are stopped the same way, and new jobs that mount it
are refused at submit (``datasets.resolve_volumes``).

When the data directory's disk runs low (``datadir.Reserve``), the watch gives back the
reserve kept for the database and scans at once; if no team is over its quota, the running
jobs of the team whose unfinished jobs' directories take the most space are stopped the
same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import FINAL_STATUSES
from gpupool.domain.units import format_bytes
from gpupool.executors.local import WORKSPACES
from gpupool.executors.usage import FilesScan, NodeFiles, tree_bytes
from gpupool.services import datasets, identity
from gpupool.services import jobs as job_service
from gpupool.settings import Settings
from gpupool.store.models import (
    AttemptModel,
    CodeUploadModel,
    DatasetBlobModel,
    JobModel,
    MembershipModel,
    ModelVersionModel,
    NotebookModel,
    RegisteredModelModel,
    TeamModel,
    UserModel,
    VolumeModel,
)

log = logging.getLogger(__name__)

# what the nodes of a pool hold of the jobs (id -> finished) and workspaces (user names) asked
NodesFiles = Callable[[dict[int, bool], set[str]], NodeFiles]

FINISHED = frozenset(status.value for status in FINAL_STATUSES)


@dataclass(frozen=True)
class TeamFiles:
    """Where a team's files are, as step (1) read them. ``jobs``: job id -> finished."""

    team_id: int
    name: str
    quota: int | None
    jobs: dict[int, bool]
    users: frozenset[str]
    known_bytes: int  # its model versions' and its members' code archives, its blobs
    volumes: frozenset[int] = frozenset()  # its volumes' ids: directories on this machine


@dataclass(frozen=True)
class TeamUsage:
    """What a team's files take, and its quota (None: none). ``running``: what the
    directories of its jobs not finished take (what may still grow)."""

    team_id: int
    name: str
    quota: int | None
    used: int
    running: int = 0
    volumes: dict[int, int] = field(default_factory=dict)  # each volume's bytes, by id

    @property
    def over(self) -> bool:
        return self.quota is not None and self.used > self.quota


class StorageScan:
    """Sums the teams' files under ``settings.data_dir``, and on a pool what the nodes say
    they hold of them (``nodes``: the executor's ``node_files``, None on one machine)."""

    def __init__(self, settings: Settings, nodes: NodesFiles | None = None) -> None:
        self.files = FilesScan(settings.jobs_dir, settings.data_dir / WORKSPACES)
        self.volumes_dir = settings.volumes_dir
        self.nodes = nodes

    def measure(self, teams: Iterable[TeamFiles]) -> list[TeamUsage]:
        teams = list(teams)
        remote = self._on_nodes(teams)
        return [self._usage(team, remote) for team in teams]

    def _on_nodes(self, teams: list[TeamFiles]) -> NodeFiles:
        if self.nodes is None:
            return NodeFiles()
        jobs = {job_id: done for team in teams for job_id, done in team.jobs.items()}
        users = {user for team in teams for user in team.users}
        return self.nodes(jobs, users) if jobs or users else NodeFiles()

    def _usage(self, team: TeamFiles, remote: NodeFiles) -> TeamUsage:
        jobs = {
            job_id: self.files.job_bytes(job_id, done) + remote.jobs.get(job_id, 0)
            for job_id, done in team.jobs.items()
        }
        running = sum(size for job_id, size in jobs.items() if not team.jobs[job_id])
        spaces = sum(
            self.files.workspace_bytes(user) + remote.workspaces.get(user, 0) for user in team.users
        )
        volumes = {v: tree_bytes(self.volumes_dir / str(v)) for v in team.volumes}
        used = sum(jobs.values()) + spaces + team.known_bytes + sum(volumes.values())
        return TeamUsage(team.team_id, team.name, team.quota, used, running, volumes)


def load_team_files(session: Session) -> list[TeamFiles]:
    """Step (1): each team not deleted, its quota, its jobs, its notebook users and what its
    archives take."""
    teams = identity.team_rows(session)
    ids = [team.id for team in teams]
    jobs: dict[int, dict[int, bool]] = {team_id: {} for team_id in ids}
    rows = session.execute(
        select(JobModel.team_id, JobModel.id, JobModel.status).where(JobModel.team_id.in_(ids))
    )
    for team_id, job_id, status in rows:
        jobs[team_id][job_id] = status in FINISHED
    spaces = _workspace_users(session, ids)
    known = _archive_bytes(session, ids)
    volumes = datasets.team_volumes(session, ids)
    return [
        TeamFiles(
            team.id,
            team.name,
            team.storage_quota,
            jobs[team.id],
            frozenset(spaces.get(team.id, ())),
            known.get(team.id, 0),
            frozenset(volumes.get(team.id, ())),
        )
        for team in teams
    ]


def record_usage(
    session: Session,
    found: list[TeamUsage],
    now: float,
    low_mark: int | None = None,
    free: int = 0,
) -> int:
    """Step (3): record each team's usage; stop the running jobs of the teams over their
    quota. ``low_mark``: the disk is under it; if no team is over its quota, stop the jobs
    of the team whose unfinished jobs' directories take the most, when that is at least
    ``low_mark`` (a disk filled by something else stops nobody). How many stops were
    recorded."""
    for usage in found:
        team = session.get(TeamModel, usage.team_id)
        if team is not None:
            team.storage_used, team.storage_scanned_at = usage.used, now
    stopped = sum(stop_team(session, u, now, over_message(u)) for u in found if u.over)
    volumes = {v: size for usage in found for v, size in usage.volumes.items()}
    for row, used in datasets.record_volume_usage(session, volumes, now):
        stopped += stop_volume(session, row, now, volume_over_message(row, used))
    if low_mark is None or stopped or not found:
        return stopped
    filler = max(found, key=lambda usage: usage.running)
    if filler.running < max(low_mark, 1):
        return stopped
    return stop_team(session, filler, now, disk_low_message(filler, free))


def stop_team(session: Session, usage: TeamUsage, now: float, message: str) -> int:
    """Record a StorageQuotaExceeded stop of each running attempt of the team's jobs."""
    rows = session.execute(
        select(AttemptModel.id, AttemptModel.job_id)
        .join(JobModel, JobModel.id == AttemptModel.job_id)
        .where(
            JobModel.team_id == usage.team_id,
            AttemptModel.status.in_(job_service.ACTIVE_ATTEMPT),
            AttemptModel.stop_reason.is_(None),
        )
    ).all()
    recorded = [
        job_service.record_stop(
            session, job_service.over_storage_quota(attempt_id, job_id, message), now
        )
        for attempt_id, job_id in rows
    ]
    if any(recorded):
        log.warning("team %s: %s", usage.name, message)
    return sum(recorded)


def stop_volume(session: Session, row: VolumeModel, now: float, message: str) -> int:
    """Record a StorageQuotaExceeded stop of each running attempt of the jobs that mount
    the volume ``row`` (each writes it: a volume is mounted read-write)."""
    rows = session.execute(
        select(AttemptModel.id, AttemptModel.job_id, JobModel.spec)
        .join(JobModel, JobModel.id == AttemptModel.job_id)
        .where(
            JobModel.team_id == row.team_id,
            AttemptModel.status.in_(job_service.ACTIVE_ATTEMPT),
            AttemptModel.stop_reason.is_(None),
        )
    ).all()
    recorded = [
        job_service.record_stop(
            session, job_service.over_storage_quota(attempt_id, job_id, message), now
        )
        for attempt_id, job_id, spec in rows
        if any(use.get("id") == row.id for use in (spec or {}).get("volumes") or [])
    ]
    if any(recorded):
        log.warning("team %s: %s", row.team.name, message)
    return sum(recorded)


def volume_over_message(row: VolumeModel, used: int) -> str:
    return (
        f"volume {row.name} takes {format_bytes(used)}, over its size of "
        f"{format_bytes(row.size_limit or 0)}: stopping the jobs that mount it (delete what it "
        "no longer needs, or give it a larger size; no new job mounts it until then)"
    )


def over_message(usage: TeamUsage) -> str:
    return (
        f"team {usage.name}'s files take {format_bytes(usage.used)}, over its storage quota "
        f"of {format_bytes(usage.quota)}: stopping its running jobs (delete outputs or model "
        "versions it no longer needs, or ask an admin for a larger quota)"
    )


def disk_low_message(usage: TeamUsage, free: int) -> str:
    quota = f" (quota {format_bytes(usage.quota)})" if usage.quota is not None else ""
    return (
        f"the server's disk is nearly full ({format_bytes(free)} free) and the unfinished jobs "
        f"of team {usage.name} take the most of it, {format_bytes(usage.running)} (its files "
        f"{format_bytes(usage.used)}{quota}): stopping its running jobs so that everyone "
        "else's work goes on"
    )


def _workspace_users(session: Session, ids: list[int]) -> dict[int, set[str]]:
    rows = session.execute(
        select(NotebookModel.team_id, UserModel.name)
        .join(UserModel, UserModel.id == NotebookModel.user_id)
        .where(NotebookModel.team_id.in_(ids))
        .distinct()
    )
    found: dict[int, set[str]] = {}
    for team_id, name in rows:
        found.setdefault(team_id, set()).add(name)
    return found


def _archive_bytes(session: Session, ids: list[int]) -> dict[int, int]:
    models = session.execute(
        select(RegisteredModelModel.team_id, func.sum(ModelVersionModel.archive_bytes))
        .join(ModelVersionModel, ModelVersionModel.model_id == RegisteredModelModel.id)
        .where(RegisteredModelModel.team_id.in_(ids))
        .group_by(RegisteredModelModel.team_id)
    )
    code = session.execute(
        select(MembershipModel.team_id, func.sum(CodeUploadModel.size_bytes))
        .join(CodeUploadModel, CodeUploadModel.user_id == MembershipModel.user_id)
        .where(MembershipModel.team_id.in_(ids))
        .group_by(MembershipModel.team_id)
    )
    blobs = session.execute(
        select(DatasetBlobModel.team_id, func.sum(DatasetBlobModel.size))
        .where(DatasetBlobModel.team_id.in_(ids))
        .group_by(DatasetBlobModel.team_id)
    )
    found: dict[int, int] = {}
    for team_id, size in [*models, *code, *blobs]:
        found[team_id] = found.get(team_id, 0) + int(size or 0)
    return found
