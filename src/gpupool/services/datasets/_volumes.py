"""Volumes: a team's mutable directories, mounted read-write by its jobs.

A volume is a name of a team (unique per team) and, on the node, a directory named by the
volume's id (``<data dir>/volumes/<id>``), made at the first job that mounts it; its bytes
count against the team's storage quota (``services.scheduling``'s storage scan). A job
names it as ``NAME:/MOUNT`` and the submit records its id, so that a volume deleted and made
again under the same name is another one. Deleting it deletes its files; it is refused while
a job of the team that mounts it has not ended.

Its ``--size`` binds: the storage scan records what each volume takes (``used_bytes``); one
over its size has the jobs that mount it stopped (as a team over its quota has) and new jobs
that mount it refused (``409 volume_full``) until it is under again or given more room.

The volumes live in ``settings.volumes_dir`` (GPUPOOL_VOLUMES_STORE): on one machine the
server's data directory; on a pool a file system every node mounts at the same path (NFS,
CephFS, Lustre), whose path the server sends with each job (``TaskMaker.volumes_of``), so a
volume is one directory whichever node a job lands on, and the server measures it here.

Visibility follows the team: its members and viewers list them, its members make and delete
them; another team's volume is answered as one that does not exist.
"""

from __future__ import annotations

import shutil

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.datasetrefs import NAME_RULE, VolumeUse, is_dataset_name
from gpupool.domain.datasets import VolumeView
from gpupool.domain.jobs import FINAL_STATUSES
from gpupool.domain.units import format_bytes
from gpupool.errors import (
    AmbiguousDataset,
    InvalidDatasetName,
    NotFound,
    VolumeExists,
    VolumeFull,
    VolumeInUse,
)
from gpupool.executors.usage import tree_bytes
from gpupool.services.core import Principal, Reads
from gpupool.services.datasets._datasets import _require_writer, _writable_team
from gpupool.services.datasets._ports import Stores
from gpupool.store.models import JobModel, TeamModel, VolumeModel


def create_volume(
    ctx: Stores, who: Principal, name: str, team: str | None, size_limit: int | None
) -> VolumeView:
    """A new, empty volume of the team (``team``, or ``who``'s only one)."""
    if not is_dataset_name(name):
        raise InvalidDatasetName(
            f"'{name[:100]}' is not a volume's name: {NAME_RULE}",
            fields=[{"field": "name", "message": NAME_RULE}],
        )
    team_id = _writable_team(ctx, who, team)
    try:
        with ctx.db.session() as session:
            query = select(VolumeModel).where(
                VolumeModel.team_id == team_id, VolumeModel.name == name
            )
            if session.scalars(query).first() is not None:
                raise VolumeExists(
                    f"your team has a volume {name} already: use it, or pick another name"
                )
            row = VolumeModel(
                team_id=team_id,
                name=name,
                size_limit=size_limit,
                created_at=ctx.clock.now(),
                created_by=who.user_id,
            )
            session.add(row)
            session.flush()
            session.refresh(row)
            return _view(row, None)
    except IntegrityError:  # made at the same time by another request
        raise VolumeExists(
            f"your team has a volume {name} already: use it, or pick another name"
        ) from None


def list_volumes(ctx: Reads, who: Principal, team: str | None = None) -> list[VolumeView]:
    """The volumes of the teams ``who`` can see (of ``team`` only, when given), by name."""
    with ctx.db.reader() as session:
        query = select(VolumeModel).join(TeamModel).order_by(VolumeModel.name, TeamModel.name)
        if not who.is_admin:
            query = query.where(VolumeModel.team_id.in_(who.team_ids or {-1}))
        if team:
            query = query.where(TeamModel.name == team, TeamModel.deleted_at.is_(None))
        return [_view(row, row.used_bytes) for row in session.scalars(query)]


def show_volume(ctx: Stores, who: Principal, name: str, team: str | None = None) -> VolumeView:
    """The volume, with the bytes its directory takes on this machine now."""
    with ctx.db.reader() as session:
        row = find_volume(session, who, name, team)
        view = _view(row, None)
    used = tree_bytes(ctx.settings.volumes_dir / str(row.id))
    return view.model_copy(update={"used_bytes": used})


def delete_volume(ctx: Stores, who: Principal, name: str, team: str | None = None) -> None:
    """Delete the volume and its files; VolumeInUse while a job that has not ended mounts
    it."""
    with ctx.db.session() as session:
        row = find_volume(session, who, name, team)
        _require_writer(who, row.team_id)
        users = _active_users(session, row)
        if users:
            listed = ", ".join(str(job) for job in users[:20])
            raise VolumeInUse(
                f"jobs {listed} mount the volume {name} and have not ended: wait for them or "
                "cancel them (gpupool cancel), then delete it",
                jobs=users,
            )
        volume_id = row.id
        session.delete(row)
    path = ctx.settings.volumes_dir / str(volume_id)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def find_volume(session: Session, who: Principal, name: str, team: str | None) -> VolumeModel:
    query = select(VolumeModel).join(TeamModel).where(VolumeModel.name == name)
    if not who.is_admin:
        query = query.where(VolumeModel.team_id.in_(who.team_ids or {-1}))
    if team:
        query = query.where(TeamModel.name == team, TeamModel.deleted_at.is_(None))
    found = list(session.scalars(query))
    if not found:
        where = f" of team {team}" if team else ""
        raise NotFound(
            f"no volume {name}{where} that you can see: list them with 'gpupool volume ls'"
        )
    if len(found) > 1:
        teams = ", ".join(sorted(row.team.name for row in found))
        raise AmbiguousDataset(
            f"teams {teams} each have a volume {name}: say which with --team", teams=teams
        )
    return found[0]


def resolve_volumes(
    session: Session, uses: list[VolumeUse], team_id: int, team: str
) -> list[VolumeUse]:
    """The job's volumes with their ids recorded, from the job's own team only."""
    resolved = []
    for use in uses:
        query = select(VolumeModel).where(
            VolumeModel.team_id == team_id, VolumeModel.name == use.name
        )
        row = session.scalars(query).first()
        if row is None:
            raise NotFound(
                f"team {team} has no volume {use.name}: make it with 'gpupool volume create "
                f"{use.name}' (a job mounts its own team's volumes)",
                volume=use.name,
            )
        refuse_full(row)
        resolved.append(use.model_copy(update={"id": row.id}))
    return resolved


def refuse_full(row: VolumeModel) -> None:
    """VolumeFull while the volume's files, as last scanned, take more than its size."""
    if row.size_limit is not None and (row.used_bytes or 0) > row.size_limit:
        raise VolumeFull(
            f"{over_message(row, row.used_bytes or 0)}, so no new job mounts it: give it a "
            "larger size (apply a Volume document with a larger size: gpupool apply -f), or "
            "delete it (gpupool volume rm)",
            volume=row.name,
            used=row.used_bytes,
            size=row.size_limit,
        )


def over_message(row: VolumeModel, used: int) -> str:
    return (
        f"volume {row.name} of team {row.team.name} takes {format_bytes(used)}, over its size "
        f"of {format_bytes(row.size_limit or 0)}"
    )


def record_volume_usage(
    session: Session, used: dict[int, int], now: float
) -> list[tuple[VolumeModel, int]]:
    """Record what each volume (id -> bytes) takes; those over their size, with it."""
    over = []
    for volume_id, size in used.items():
        row = session.get(VolumeModel, volume_id)
        if row is None:  # deleted since the scan began
            continue
        row.used_bytes, row.used_at = size, now
        if row.size_limit is not None and size > row.size_limit:
            over.append((row, size))
    return over


def team_volumes(session: Session, team_ids: list[int]) -> dict[int, list[int]]:
    """Each team's volumes' ids (what the storage scan sums)."""
    found: dict[int, list[int]] = {}
    query = select(VolumeModel.team_id, VolumeModel.id).where(VolumeModel.team_id.in_(team_ids))
    for team_id, volume_id in session.execute(query):
        found.setdefault(team_id, []).append(volume_id)
    return found


def _active_users(session: Session, row: VolumeModel) -> list[int]:
    """The team's jobs that have not ended and mount the volume (by its id)."""
    active = [status.value for status in FINAL_STATUSES]
    query = select(JobModel.id, JobModel.spec).where(
        JobModel.team_id == row.team_id, JobModel.status.not_in(active)
    )
    return [
        job_id
        for job_id, spec in session.execute(query)
        if any(use.get("id") == row.id for use in (spec or {}).get("volumes") or [])
    ]


def _view(row: VolumeModel, used: int | None) -> VolumeView:
    return VolumeView(
        name=row.name,
        team=row.team.name,
        size_limit_bytes=row.size_limit,
        used_bytes=used,
        created_at=row.created_at,
        created_by=row.creator.name,
    )
