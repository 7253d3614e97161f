"""The model registry: numbered versions of a team's models, registered from jobs' outputs.

Registering a version takes three steps, so that no transaction is held across the copy:

1. load what is needed (the job, its team, spec and final metrics) and check who asks, in a
   read-only transaction;
2. pack the job's outputs (or a sub path of them) into one archive in the model store's
   ``incoming`` directory, with no transaction open: the executor writes it (the local one
   from this machine's disk; the Ray one fetches it from the node that ran the job), the
   archive is read back to list its files with their sizes and SHA-256, flushed, and renamed
   into place under its own hash (``sha256/<hex>.tar.gz``, kept once);
3. record the version and its files in one short transaction.

A crash before step 3 leaves at most an archive no version names: no half version is ever
visible. The version's number is the model's highest plus one, chosen in step 3 under the
database's write lock.

Visibility follows the team: a team's models are seen by its members (viewers too) and by
admins; registering needs a member (not a viewer) of the job's team. Anything else is
answered as if the model (or the job) did not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain.code import ref_of
from gpupool.domain.jobs import JobStatus
from gpupool.domain.models import (
    NAME_RULE,
    ModelDetailView,
    ModelFileView,
    ModelVersionSummary,
    ModelVersionView,
    ModelView,
    is_model_name,
    source_path,
)
from gpupool.errors import (
    AmbiguousModel,
    BadModelPath,
    InvalidModelName,
    InvalidRequest,
    NotFound,
    SourceJobNotEnded,
    SourceJobNotSucceeded,
)
from gpupool.executors import outputs
from gpupool.services import identity, jobs
from gpupool.services.core import Principal, Reads, Writes
from gpupool.services.jobs import Incoming
from gpupool.services.metrics import final_values
from gpupool.services.models._ports import Packs, Registers
from gpupool.store.models import (
    ModelFileModel,
    ModelVersionModel,
    RegisteredModelModel,
    TeamModel,
)

INCOMING = "incoming"  # archives being written, below the model store


@dataclass(frozen=True)
class Registration:
    """What a user asks to register: a new version of ``name`` from ``job_id``'s outputs."""

    name: str
    job_id: int
    path: str = ""
    team: str | None = None
    description: str | None = None
    allow_failed: bool = False


@dataclass(frozen=True)
class Source:
    """What step 1 read: the job the version comes from, and what to remember of it."""

    name: str
    job_id: int
    team_id: int
    node: str | None
    path: str
    spec: dict[str, Any]
    metrics: dict[str, float]
    description: str | None


@dataclass(frozen=True)
class Packed:
    """What step 2 made: the stored archive and the files it holds."""

    ref: str
    path: Path
    archive_bytes: int
    files: list[outputs.PackedFile]


# -- what the API (and the deployments) call --------------------------------------------------


def resolve_version(
    session: Session, who: Principal, name: str, version: int | None, team: str | None = None
) -> ModelVersionView:
    """Version ``version`` of the model ``name`` that ``who`` can see (the latest when None);
    ``team`` picks among teams with a model of that name. NotFound when there is none
    that ``who`` can see, AmbiguousModel when several of its teams have one."""
    model = find_model(session, who, name, team)
    query = select(ModelVersionModel).where(ModelVersionModel.model_id == model.id)
    if version is None:
        row = session.scalars(query.order_by(ModelVersionModel.number.desc()).limit(1)).first()
    else:
        row = session.scalars(query.where(ModelVersionModel.number == version)).first()
    if row is None:
        raise NotFound(
            f"model {name} of team {model.team.name} has no version {version}: "
            f"see its versions with 'gpupool model show {name}'"
        )
    return version_view(session, row)


def list_models(ctx: Reads, who: Principal, team: str | None = None) -> list[ModelView]:
    """The models of the teams ``who`` can see (of ``team`` only, when given), by name."""
    with ctx.db.reader() as session:
        return [_model_view(*found) for found in _models_with_counts(session, who, team)]


def show_model(ctx: Reads, who: Principal, name: str, team: str | None = None) -> ModelDetailView:
    """The model with its versions, newest first."""
    with ctx.db.reader() as session:
        model = find_model(session, who, name, team)
        query = (
            select(ModelVersionModel)
            .where(ModelVersionModel.model_id == model.id)
            .order_by(ModelVersionModel.number.desc())
        )
        versions = [_summary(row) for row in session.scalars(query)]
        return ModelDetailView(
            name=model.name,
            team=model.team.name,
            latest_version=versions[0].version,
            version_count=len(versions),
            created_at=model.created_at,
            updated_at=versions[0].created_at,
            versions=versions,
        )


def show_version(
    ctx: Reads, who: Principal, name: str, version: int | None, team: str | None = None
) -> ModelVersionView:
    with ctx.db.reader() as session:
        return resolve_version(session, who, name, version, team)


def register(ctx: Registers, who: Principal, asked: Registration) -> ModelVersionView:
    """Record a new version of ``asked.name`` from the job's outputs (see the module's
    docstring for the steps). Slow (it copies files): call it from a worker thread."""
    source = load_source(ctx, who, asked)
    packed = pack(ctx, source)
    return record(ctx, who, source, packed)


# -- the steps ---------------------------------------------------------------------------------


def find_model(
    session: Session, who: Principal, name: str, team: str | None
) -> RegisteredModelModel:
    query = select(RegisteredModelModel).where(RegisteredModelModel.name == name)
    if not who.is_admin:
        query = query.where(RegisteredModelModel.team_id.in_(who.team_ids or {-1}))
    if team:
        query = query.join(TeamModel).where(TeamModel.name == team, TeamModel.deleted_at.is_(None))
    found = list(session.scalars(query))
    if not found:
        where = f" of team {team}" if team else ""
        raise NotFound(
            f"no model {name}{where} that you can see: list models with 'gpupool model ls'"
        )
    if len(found) > 1:
        teams = ", ".join(sorted(model.team.name for model in found))
        raise AmbiguousModel(
            f"teams {teams} each have a model {name}: say which with --team", teams=teams
        )
    return found[0]


def load_source(ctx: Reads, who: Principal, asked: Registration) -> Source:
    """Step 1: check the request and who asks, and read what the version remembers."""
    if not is_model_name(asked.name):
        raise InvalidModelName(
            f"'{asked.name}' is not a model's name: {NAME_RULE}",
            fields=[{"field": "name", "message": NAME_RULE}],
        )
    try:
        path = source_path(asked.path)
    except ValueError as problem:
        raise BadModelPath(f"{problem}: {BadModelPath.__doc__}", path=asked.path) from None
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, asked.job_id)
        who.require_member()
        if not who.can_act_on_team(job.team_id):
            raise NotFound(f"no job {asked.job_id}: list your jobs with 'gpupool ls'")
        _check_team(asked.team, job.team.name)
        identity.refuse_over_storage(job.team)  # its files are over: it stores no more
        _check_ended(asked.job_id, JobStatus(job.status), asked.allow_failed)
        return Source(
            name=asked.name,
            job_id=job.id,
            team_id=job.team_id,
            node=job.node,
            path=path,
            spec=dict(job.spec),
            metrics=dict(final_values(session, job.id)),
            description=asked.description,
        )


def pack(ctx: Packs, source: Source) -> Packed:
    """Step 2 (no transaction open): the job's files as one archive in the model store."""
    limits = ctx.settings.model_limits()
    store = ctx.settings.models_dir
    with Incoming.open(
        store / INCOMING,
        prefix="version",
        max_bytes=limits.archive_bytes,
        too_large=lambda _size: outputs.too_large(limits),
        what="model storage",
    ) as incoming:
        ctx.executor.pack_outputs(source.job_id, source.node, source.path, limits, incoming)
        incoming.finish()
        files = outputs.index(incoming.path, limits)
        ref = ref_of(incoming.hexdigest())
        final = archive_path(store, ref)
        if not final.exists():
            incoming.publish(final)
        return Packed(ref, final, incoming.size, files)


def record(ctx: Writes, who: Principal, source: Source, packed: Packed) -> ModelVersionView:
    """Step 3: the version and its files, in one transaction."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        model = _model_for(session, source, now)
        latest = session.scalar(
            select(func.max(ModelVersionModel.number)).where(ModelVersionModel.model_id == model.id)
        )
        row = ModelVersionModel(
            model_id=model.id,
            number=(latest or 0) + 1,
            description=source.description,
            archive=packed.ref,
            archive_path=str(packed.path),
            archive_bytes=packed.archive_bytes,
            size_bytes=sum(f.size for f in packed.files),
            file_count=len(packed.files),
            source_job_id=source.job_id,
            source_path=source.path,
            spec=source.spec,
            metrics=source.metrics,
            created_at=now,
            created_by=who.user_id,
        )
        session.add(row)
        session.flush()
        session.add_all(
            ModelFileModel(version_id=row.id, path=f.path, size=f.size, sha256=f.sha256)
            for f in packed.files
        )
        session.flush()
        return version_view(session, row)


def archive_path(store: Path, ref: str) -> Path:
    return store / "sha256" / f"{ref.removeprefix('sha256:')}.tar.gz"


def version_view(session: Session, row: ModelVersionModel) -> ModelVersionView:
    query = (
        select(ModelFileModel)
        .where(ModelFileModel.version_id == row.id)
        .order_by(ModelFileModel.path)
    )
    files = [
        ModelFileView(path=f.path, size=f.size, sha256=f.sha256) for f in session.scalars(query)
    ]
    return ModelVersionView(
        name=row.model.name,
        team=row.model.team.name,
        version=row.number,
        description=row.description,
        archive=row.archive,
        archive_bytes=row.archive_bytes,
        archive_path=row.archive_path,
        size_bytes=row.size_bytes,
        files=files,
        source_job_id=row.source_job_id,
        source_path=row.source_path,
        spec=row.spec,
        metrics=row.metrics,
        created_at=row.created_at,
        created_by=row.creator.name,
    )


def _check_team(asked: str | None, team: str) -> None:
    if asked and asked != team:
        raise InvalidRequest(
            f"job's team is {team}, not {asked}: a model version belongs to the team of the "
            f"job it comes from; leave --team out, or give --team {team}",
            fields=[{"field": "team", "message": f"the job is of team {team}"}],
        )


def _check_ended(job_id: int, status: JobStatus, allow_failed: bool) -> None:
    if not status.is_final:
        raise SourceJobNotEnded(
            f"job {job_id} is {status.value}: its outputs may be half written; register once "
            "it has ended (gpupool logs --follow waits for it)",
            status=status.value,
        )
    if status != JobStatus.SUCCEEDED and not allow_failed:
        raise SourceJobNotSucceeded(
            f"job {job_id} {status.value}: register from a job that succeeded, or add "
            "--allow-failed to take what it left all the same",
            status=status.value,
        )


def _model_for(session: Session, source: Source, now: float) -> RegisteredModelModel:
    query = select(RegisteredModelModel).where(
        RegisteredModelModel.team_id == source.team_id, RegisteredModelModel.name == source.name
    )
    model = session.scalars(query).first()
    if model is None:
        model = RegisteredModelModel(team_id=source.team_id, name=source.name, created_at=now)
        session.add(model)
        session.flush()
    return model


def _models_with_counts(
    session: Session, who: Principal, team: str | None
) -> list[tuple[RegisteredModelModel, int, int, float]]:
    versions = (
        select(
            ModelVersionModel.model_id,
            func.max(ModelVersionModel.number).label("latest"),
            func.count().label("count"),
            func.max(ModelVersionModel.created_at).label("updated_at"),
        )
        .group_by(ModelVersionModel.model_id)
        .subquery()
    )
    query = (
        select(RegisteredModelModel, versions.c.latest, versions.c.count, versions.c.updated_at)
        .join(versions, versions.c.model_id == RegisteredModelModel.id)
        .join(TeamModel, TeamModel.id == RegisteredModelModel.team_id)
        .order_by(RegisteredModelModel.name, TeamModel.name)
    )
    if not who.is_admin:
        query = query.where(RegisteredModelModel.team_id.in_(who.team_ids or {-1}))
    if team:
        query = query.where(TeamModel.name == team, TeamModel.deleted_at.is_(None))
    return [tuple(found) for found in session.execute(query)]  # type: ignore[misc]


def _model_view(model: RegisteredModelModel, latest: int, count: int, updated: float) -> ModelView:
    return ModelView(
        name=model.name,
        team=model.team.name,
        latest_version=latest,
        version_count=count,
        created_at=model.created_at,
        updated_at=updated,
    )


def _summary(row: ModelVersionModel) -> ModelVersionSummary:
    return ModelVersionSummary(
        version=row.number,
        description=row.description,
        archive=row.archive,
        size_bytes=row.size_bytes,
        file_count=row.file_count,
        source_job_id=row.source_job_id,
        metrics=row.metrics,
        created_at=row.created_at,
        created_by=row.creator.name,
    )
