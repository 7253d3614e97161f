"""Datasets: a team's named, immutable, numbered versions over content-addressed blobs.

An upload from a client takes four steps, none of which holds a transaction across I/O:

1. the client walks its directory, hashes each file and uploads the manifest as a blob
   (``receive_blob``);
2. it asks which blobs the store lacks for the team (``plan``): the manifest is read and
   checked (hostile paths, the limits) and compared with the blobs the team holds;
3. it uploads those blobs only (``receive_blob``: hash checked, fsynced and renamed into
   place before the team is recorded as holding it);
4. it commits the version (``commit``): every blob must be held by the team, else
   ``409 blobs_missing`` naming them; the version's number is the dataset's highest plus one.

A team holds a blob once one of its members uploaded it (or the server made it from one of
the team's jobs): what a team's upload may skip never depends on what another team stored,
so no team learns another's files by their hashes. The bytes are kept once all the same.

``from_job`` makes a version server side from a job's outputs (no upload): the executor
packs them where they are (the local disk, or the node that ran the job), and each file
is kept as a blob as the archive is read.

Visibility follows the team, as for models: its members and viewers see its datasets,
admins see all; making and deleting versions needs a member (viewers 403). Anything else
is answered as if the dataset did not exist.
"""

from __future__ import annotations

import asyncio
import tarfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpupool.domain.code import CodeLimits
from gpupool.domain.datasetrefs import NAME_RULE, DatasetUse, is_dataset_name
from gpupool.domain.datasets import (
    DatasetDetailView,
    DatasetFileView,
    DatasetVersionSummary,
    DatasetVersionView,
    DatasetView,
    Manifest,
    ManifestError,
    ManifestFile,
    ManifestTooLarge,
    UploadPlanView,
    manifest_bytes,
    parse_manifest,
)
from gpupool.domain.jobs import FINAL_STATUSES, JobStatus
from gpupool.domain.models import source_path
from gpupool.domain.units import format_bytes
from gpupool.errors import (
    AmbiguousDataset,
    BadManifest,
    BadModelPath,
    BlobsMissing,
    DatasetInUse,
    DatasetTooLarge,
    Forbidden,
    InvalidDatasetName,
    InvalidRequest,
    ModelTooLarge,
    NotFound,
    SourceJobNotEnded,
)
from gpupool.services import identity
from gpupool.services.core import Principal, Reads
from gpupool.services.datasets._blobs import (
    incoming,
    keep_bytes,
    keep_stream,
    read_blob,
    receive,
    too_large,
)
from gpupool.services.datasets._ports import Copies, Stores
from gpupool.settings import Settings
from gpupool.store.models import (
    DatasetBlobModel,
    DatasetModel,
    DatasetUseModel,
    DatasetVersionModel,
    JobModel,
    TeamModel,
)

MAX_NAMED_MISSING = 100  # a 409 names this many missing blobs (and says how many there are)
IN_CHUNKS = 500  # blobs looked up per query (SQL's IN lists stay short)
MANIFEST_BYTES_PER_FILE = 400  # a manifest's bytes a file may take (path, size, mode, hash)


@dataclass(frozen=True)
class NewVersion:
    """What a user asks to commit: ``manifest`` (hex) as a new version of ``name``."""

    name: str
    manifest: str
    team: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class FromJob:
    """What a user asks to make server side: a new version of ``name`` from ``job_id``'s
    outputs (below ``path``)."""

    name: str
    job_id: int
    path: str = ""
    team: str | None = None
    description: str | None = None


# -- reading -----------------------------------------------------------------------------------


def list_datasets(ctx: Reads, who: Principal, team: str | None = None) -> list[DatasetView]:
    """The datasets of the teams ``who`` can see (of ``team`` only, when given), by name."""
    with ctx.db.reader() as session:
        query = select(DatasetModel).join(TeamModel).order_by(DatasetModel.name, TeamModel.name)
        query = _visible(query, who, team)
        return [_dataset_view(session, row) for row in session.scalars(query)]


def show_dataset(
    ctx: Reads, who: Principal, name: str, team: str | None = None
) -> DatasetDetailView:
    """The dataset with its versions, newest first."""
    with ctx.db.reader() as session:
        dataset = find_dataset(session, who, name, team)
        versions = [_summary(row) for row in _versions(session, dataset.id)]
        view = _dataset_view(session, dataset)
        return DatasetDetailView(**view.model_dump(), versions=versions)


def show_version(
    ctx: Stores,
    who: Principal,
    name: str,
    version: int | None,
    team: str | None = None,
    files: bool = True,
) -> DatasetVersionView:
    """One version (the latest when ``version`` is None), with its files when ``files``."""
    with ctx.db.reader() as session:
        row = resolve(session, who, name, version, team)
        view = version_view(row)
    if files:
        manifest = load_manifest(ctx.settings, row.manifest)
        listed = [
            DatasetFileView(path=f.path, size=f.size, mode=f.mode, sha256=f.sha256)
            for f in manifest.files
        ]
        view = view.model_copy(update={"files": listed})
    return view


def resolve(
    session: Session, who: Principal, name: str, version: int | None, team: str | None = None
) -> DatasetVersionModel:
    """Version ``version`` of the dataset ``name`` that ``who`` can see (the latest when
    None); NotFound when there is none, AmbiguousDataset when several of its teams have one."""
    dataset = find_dataset(session, who, name, team)
    query = select(DatasetVersionModel).where(DatasetVersionModel.dataset_id == dataset.id)
    if version is None:
        row = session.scalars(query.order_by(DatasetVersionModel.number.desc()).limit(1)).first()
    else:
        row = session.scalars(query.where(DatasetVersionModel.number == version)).first()
    if row is None:
        which = "versions" if version is None else f"version {version}"
        raise NotFound(
            f"dataset {name} of team {dataset.team.name} has no {which}: see its versions "
            f"with 'gpupool dataset show {name}'"
        )
    return row


def find_dataset(session: Session, who: Principal, name: str, team: str | None) -> DatasetModel:
    """The dataset ``name`` of a team ``who`` can see (``team``: of that one)."""
    query = _visible(select(DatasetModel).join(TeamModel), who, team)
    found = list(session.scalars(query.where(DatasetModel.name == name)))
    if not found:
        where = f" of team {team}" if team else ""
        raise NotFound(
            f"no dataset {name}{where} that you can see: list datasets with 'gpupool dataset ls'"
        )
    if len(found) > 1:
        teams = ", ".join(sorted(row.team.name for row in found))
        raise AmbiguousDataset(
            f"teams {teams} each have a dataset {name}: say which with --team", teams=teams
        )
    return found[0]


def load_manifest(settings: Settings, sha256: str) -> Manifest:
    """A version's manifest, read back from the store (it was checked when committed)."""
    data = read_blob(settings, sha256, _manifest_limit(settings))
    if data is None:
        raise RuntimeError(f"the manifest {sha256} is missing from the dataset store")
    return parse_manifest(data, settings.max_dataset_files, settings.max_dataset_bytes)


# -- uploading ---------------------------------------------------------------------------------


async def receive_blob(
    ctx: Stores,
    who: Principal,
    team: str | None,
    sha256: str,
    chunks: AsyncIterator[bytes],
    declared_bytes: int | None = None,
    gzipped: bool = False,
) -> int:
    """Keep the blob read from ``chunks`` (its SHA-256 checked; ``gzipped``: inflated first)
    and record that ``who``'s team holds it; its size. Slow: the bytes are written as they
    come."""
    if declared_bytes is not None and declared_bytes > ctx.settings.max_dataset_bytes:
        raise too_large(declared_bytes, ctx.settings)
    team_id = await asyncio.to_thread(_writable_team, ctx, who, team)
    size = await receive(ctx.settings, chunks, sha256, gzipped)
    await asyncio.to_thread(_hold, ctx, team_id, {sha256: size})
    return size


def plan(ctx: Stores, who: Principal, asked: NewVersion) -> UploadPlanView:
    """The blobs of the manifest ``asked.manifest`` that the team lacks: what to upload."""
    _check_name(asked.name)
    team_id = _writable_team(ctx, who, asked.team)
    manifest = _manifest_of(ctx, team_id, asked.manifest)
    with ctx.db.reader() as session:
        held = _held(session, team_id, manifest.blobs)
    missing = sorted(sha for sha in manifest.blobs if sha not in held)
    return UploadPlanView(
        manifest=f"sha256:{asked.manifest}",
        file_count=len(manifest.files),
        size_bytes=manifest.size_bytes,
        missing=missing,
        missing_bytes=sum(manifest.blobs[sha] for sha in missing),
    )


def commit(ctx: Stores, who: Principal, asked: NewVersion) -> DatasetVersionView:
    """Record ``asked.manifest`` as the dataset's next version; BlobsMissing when the team
    lacks some of its blobs (or holds one of another size)."""
    _check_name(asked.name)
    team_id = _writable_team(ctx, who, asked.team)
    manifest = _manifest_of(ctx, team_id, asked.manifest)
    with ctx.db.session() as session:
        held = _held(session, team_id, manifest.blobs)
        missing = sorted(sha for sha, size in manifest.blobs.items() if held.get(sha) != size)
        if missing:
            raise BlobsMissing(
                f"{len(missing)} of the version's {len(manifest.blobs)} blobs were not uploaded "
                f"(or not by your team): upload them (PUT /api/v1/dataset-blobs/SHA256), then "
                "commit again; 'gpupool dataset create' does both",
                missing=missing[:MAX_NAMED_MISSING],
                missing_count=len(missing),
            )
        row = _record(ctx.clock.now(), session, who, team_id, asked.name, asked.manifest, manifest)
        row.description = asked.description
        session.flush()
        return version_view(row)


def from_job(ctx: Copies, who: Principal, asked: FromJob) -> DatasetVersionView:
    """A new version of the files a job left below ``asked.path`` of its outputs, made on
    the server (no upload). Slow (it copies the files): call it from a worker thread."""
    _check_name(asked.name)
    try:
        path = source_path(asked.path)
    except ValueError as problem:
        raise BadModelPath(f"{problem}: {BadModelPath.__doc__}", path=asked.path) from None
    team_id, node = source_job(ctx, who, asked.job_id, asked.team)
    files = _pack_into_blobs(ctx, asked.job_id, node, path)
    data = manifest_bytes(files)
    sha = keep_bytes(ctx.settings, data)
    manifest = parse_manifest(data, ctx.settings.max_dataset_files, ctx.settings.max_dataset_bytes)
    sizes = {**manifest.blobs, sha: len(data)}
    with ctx.db.session() as session:
        _hold_in(session, team_id, sizes, ctx.clock.now())
        row = _record(ctx.clock.now(), session, who, team_id, asked.name, sha, manifest)
        row.source_job_id, row.description = asked.job_id, asked.description
        session.flush()
        return version_view(row)


def source_job(ctx: Reads, who: Principal, job_id: int, team: str | None) -> tuple[int, str | None]:
    """The team and node of the job a version is made from: one of a team ``who`` is a
    member of (any other is answered as one that does not exist), of ``team`` when given,
    within its storage quota, and ended (SourceJobNotEnded: its outputs may be half
    written)."""
    with ctx.db.reader() as session:
        job = session.get(JobModel, job_id)
        if job is None or not who.can_see_team(job.team_id):
            raise NotFound(f"no job {job_id}: list your jobs with 'gpupool ls'")
        who.require_member()
        if not who.can_act_on_team(job.team_id):
            raise NotFound(f"no job {job_id}: list your jobs with 'gpupool ls'")
        if team and team != job.team.name:
            raise InvalidRequest(
                f"job {job.id} is of team {job.team.name}, not {team}: a version made "
                f"from a job belongs to the job's team; leave --team out",
                fields=[{"field": "team", "message": f"the job is of team {job.team.name}"}],
            )
        identity.refuse_over_storage(job.team)
        status = JobStatus(job.status)
        if status not in FINAL_STATUSES:
            raise SourceJobNotEnded(
                f"job {job.id} is {status.value}: its outputs may be half written; make the "
                "version once it has ended (gpupool logs --follow waits for it)",
                status=status.value,
            )
        return job.team_id, job.node


# -- deleting ----------------------------------------------------------------------------------


def delete_dataset(
    ctx: Stores, who: Principal, name: str, version: int | None, team: str | None = None
) -> None:
    """Delete version ``version`` of the dataset (all of it, the dataset too, when None);
    DatasetInUse while a job that has not ended uses one of them. The blobs stay in the
    store (other versions, and other teams, may share them)."""
    with ctx.db.session() as session:
        dataset = find_dataset(session, who, name, team)
        _require_writer(who, dataset.team_id)
        query = select(DatasetVersionModel).where(DatasetVersionModel.dataset_id == dataset.id)
        if version is not None:
            query = query.where(DatasetVersionModel.number == version)
        rows = list(session.scalars(query))
        if version is not None and not rows:
            raise NotFound(
                f"dataset {name} of team {dataset.team.name} has no version {version}: see "
                f"its versions with 'gpupool dataset show {name}'"
            )
        ids = [row.id for row in rows]
        users = _active_users(session, ids)
        if users:
            listed = ", ".join(str(job) for job in users[:20])
            raise DatasetInUse(
                f"jobs {listed} use {name}{'' if version is None else f':{version}'} and have "
                "not ended: wait for them or cancel them (gpupool cancel), then delete it",
                jobs=users,
            )
        session.execute(delete(DatasetVersionModel).where(DatasetVersionModel.id.in_(ids)))
        left = session.scalar(
            select(func.count()).where(DatasetVersionModel.dataset_id == dataset.id)
        )
        if version is None or not left:
            session.delete(dataset)


def _active_users(session: Session, version_ids: list[int]) -> list[int]:
    """The jobs that have not ended and use one of these versions."""
    if not version_ids:
        return []
    active = [s.value for s in JobStatus if s not in FINAL_STATUSES]
    query = (
        select(DatasetUseModel.job_id)
        .join(JobModel, JobModel.id == DatasetUseModel.job_id)
        .where(DatasetUseModel.version_id.in_(version_ids), JobModel.status.in_(active))
        .distinct()
        .order_by(DatasetUseModel.job_id)
    )
    return list(session.scalars(query))


# -- the parts ---------------------------------------------------------------------------------


def version_view(row: DatasetVersionModel) -> DatasetVersionView:
    return DatasetVersionView(
        name=row.dataset.name, team=row.dataset.team.name, **_summary(row).model_dump()
    )


def _summary(row: DatasetVersionModel) -> DatasetVersionSummary:
    return DatasetVersionSummary(
        version=row.number,
        manifest=f"sha256:{row.manifest}",
        file_count=row.file_count,
        size_bytes=row.size_bytes,
        blob_count=row.blob_count,
        description=row.description,
        source_job_id=row.source_job_id,
        created_at=row.created_at,
        created_by=row.creator.name,
    )


def _dataset_view(session: Session, dataset: DatasetModel) -> DatasetView:
    versions = _versions(session, dataset.id)
    latest = versions[0] if versions else None
    return DatasetView(
        name=dataset.name,
        team=dataset.team.name,
        latest_version=latest.number if latest else None,
        version_count=len(versions),
        size_bytes=latest.size_bytes if latest else 0,
        created_at=dataset.created_at,
        updated_at=latest.created_at if latest else dataset.created_at,
    )


def _versions(session: Session, dataset_id: int) -> list[DatasetVersionModel]:
    query = (
        select(DatasetVersionModel)
        .where(DatasetVersionModel.dataset_id == dataset_id)
        .order_by(DatasetVersionModel.number.desc())
    )
    return list(session.scalars(query))


def _visible(query, who: Principal, team: str | None):  # noqa: ANN001, ANN202 - a Select
    if not who.is_admin:
        query = query.where(DatasetModel.team_id.in_(who.team_ids or {-1}))
    if team:
        query = query.where(TeamModel.name == team, TeamModel.deleted_at.is_(None))
    return query


def _check_name(name: str) -> None:
    if not is_dataset_name(name):
        raise InvalidDatasetName(
            f"'{name[:100]}' is not a dataset's name: {NAME_RULE}",
            fields=[{"field": "name", "message": NAME_RULE}],
        )


def _require_writer(who: Principal, team_id: int) -> None:
    who.require_member()
    if not who.can_act_on_team(team_id):
        raise Forbidden("viewers of a team read its datasets; only its members change them")


def _writable_team(ctx: Reads, who: Principal, name: str | None) -> int:
    """The team ``who`` makes a version for: ``name``, or its only team. NotFound for a team
    it is not a member of (as if it did not exist); StorageQuotaExceeded when it is over."""
    who.require_member()
    with ctx.db.reader() as session:
        if name:
            query = select(TeamModel).where(TeamModel.name == name, TeamModel.deleted_at.is_(None))
            team = session.scalars(query).first()
            if team is None or not who.can_act_on_team(team.id):
                raise NotFound(
                    f"no team {name} of yours: give one of your teams with --team "
                    "('gpupool whoami' lists them)"
                )
        else:
            mine = list(
                session.scalars(
                    select(TeamModel).where(
                        TeamModel.id.in_(who.team_ids or {-1}), TeamModel.deleted_at.is_(None)
                    )
                )
            )
            if not mine:
                raise InvalidRequest("you belong to no team: ask an admin to add you to one")
            if len(mine) > 1:
                names = ", ".join(sorted(t.name for t in mine))
                raise AmbiguousDataset(
                    f"you belong to several teams ({names}): choose one with --team", teams=names
                )
            team = mine[0]
        identity.refuse_over_storage(team)
        return team.id


def _manifest_limit(settings: Settings) -> int:
    return 1024 + MANIFEST_BYTES_PER_FILE * settings.max_dataset_files


def _manifest_of(ctx: Stores, team_id: int, sha256: str) -> Manifest:
    """The manifest ``sha256``, which the team must hold (uploaded by one of its members)."""
    with ctx.db.reader() as session:
        held = _held(session, team_id, {sha256: 0})
    data = read_blob(ctx.settings, sha256, _manifest_limit(ctx.settings)) if held else None
    if data is None:
        raise BlobsMissing(
            f"the manifest {sha256} was not uploaded by your team: upload it first "
            "(PUT /api/v1/dataset-blobs/SHA256)",
            missing=[sha256],
            missing_count=1,
        )
    try:
        return parse_manifest(data, ctx.settings.max_dataset_files, ctx.settings.max_dataset_bytes)
    except ManifestTooLarge as too_many:
        raise _too_large(ctx.settings, too_many.files, too_many.size_bytes) from None
    except ManifestError as problem:
        details = {"path": problem.path} if problem.path is not None else {}
        raise BadManifest(f"{problem}: {BadManifest.__doc__}", **details) from None


def _too_large(settings: Settings, files: int, size: int) -> DatasetTooLarge:
    return DatasetTooLarge(
        f"the version holds {files:,} files, {format_bytes(size)}: this server keeps at most "
        f"{settings.max_dataset_files:,} files and {format_bytes(settings.max_dataset_bytes)} "
        "in one (GPUPOOL_MAX_DATASET_FILES, GPUPOOL_MAX_DATASET_BYTES): split it into several "
        "datasets, or ask an admin to raise the limits",
        files=files,
        size_bytes=size,
    )


def _held(session: Session, team_id: int, wanted: Iterable[str]) -> dict[str, int]:
    """Which of ``wanted`` (hex) the team holds, with their sizes."""
    shas = list(wanted)
    found: dict[str, int] = {}
    for start in range(0, len(shas), IN_CHUNKS):
        query = select(DatasetBlobModel.sha256, DatasetBlobModel.size).where(
            DatasetBlobModel.team_id == team_id,
            DatasetBlobModel.sha256.in_(shas[start : start + IN_CHUNKS]),
        )
        found.update((sha, size) for sha, size in session.execute(query))
    return found


def _hold(ctx: Stores, team_id: int, sizes: dict[str, int]) -> None:
    with ctx.db.session() as session:
        _hold_in(session, team_id, sizes, ctx.clock.now())


def _hold_in(session: Session, team_id: int, sizes: dict[str, int], now: float) -> None:
    """Record that the team holds these blobs (those it did not hold already)."""
    held = _held(session, team_id, sizes)
    session.add_all(
        DatasetBlobModel(team_id=team_id, sha256=sha, size=size, created_at=now)
        for sha, size in sizes.items()
        if sha not in held
    )
    session.flush()


def _record(
    now: float,
    session: Session,
    who: Principal,
    team_id: int,
    name: str,
    sha256: str,
    manifest: Manifest,
) -> DatasetVersionModel:
    """The dataset's next version (the dataset made when it has none), in ``session``."""
    query = select(DatasetModel).where(DatasetModel.team_id == team_id, DatasetModel.name == name)
    dataset = session.scalars(query).first()
    if dataset is None:
        dataset = DatasetModel(team_id=team_id, name=name, created_at=now, created_by=who.user_id)
        session.add(dataset)
        session.flush()
    latest = session.scalar(
        select(func.max(DatasetVersionModel.number)).where(
            DatasetVersionModel.dataset_id == dataset.id
        )
    )
    row = DatasetVersionModel(
        dataset_id=dataset.id,
        number=(latest or 0) + 1,
        manifest=sha256,
        file_count=len(manifest.files),
        size_bytes=manifest.size_bytes,
        blob_count=len(manifest.blobs),
        created_at=now,
        created_by=who.user_id,
    )
    session.add(row)
    session.flush()
    session.refresh(row)
    return row


def _pack_into_blobs(ctx: Copies, job_id: int, node: str | None, path: str) -> list[ManifestFile]:
    """The job's files below ``path``, each kept as a blob: the executor packs them into an
    archive where they are (checking links and special files), read back member by member."""
    settings = ctx.settings
    allowance = 1024 * (settings.max_dataset_files + 2) + settings.max_dataset_bytes // 100
    limits = CodeLimits(
        settings.max_dataset_bytes + allowance,
        settings.max_dataset_bytes,
        settings.max_dataset_files,
    )
    with incoming(settings, limits.archive_bytes) as packed:
        try:
            ctx.executor.pack_outputs(job_id, node, path, limits, packed)
        except ModelTooLarge as over:
            raise DatasetTooLarge(
                over.message.replace("model version", "dataset version")
            ) from None
        packed.finish()
        files = []
        with tarfile.open(packed.path, mode="r:gz") as tar:
            for member in tar:
                if not member.isfile():
                    continue  # directories: a manifest lists files only
                source = tar.extractfile(member)
                if source is None:
                    continue
                sha, size = keep_stream(settings, source)
                files.append(ManifestFile(member.name, size, member.mode & 0o777, sha))
        return files


# -- jobs that read datasets -------------------------------------------------------------------


def resolve_uses(
    session: Session, uses: list[DatasetUse], team_id: int, team: str
) -> list[DatasetUse]:
    """The job's datasets with their versions and manifests recorded (the latest version
    when none is given), from the job's own team only: another team's dataset is answered
    as one that does not exist."""
    resolved = []
    for use in uses:
        row = _team_version(session, team_id, use.name, use.version)
        if row is None:
            which = f"{use.name}:{use.version}" if use.version else use.name
            raise NotFound(
                f"team {team} has no dataset {which}: a job reads its own team's datasets "
                "('gpupool dataset ls --team TEAM' lists them)",
                dataset=which,
            )
        resolved.append(use.model_copy(update={"version": row.number, "manifest": row.manifest}))
    return resolved


def attach_uses(session: Session, job_ids: list[int], team_id: int, uses: list[DatasetUse]) -> None:
    """Record which versions the jobs read (what keeps them from being deleted under them):
    a job, or every task of an array."""
    for use in uses:
        row = _team_version(session, team_id, use.name, use.version)
        if row is not None:
            session.add_all(
                DatasetUseModel(job_id=job_id, version_id=row.id, mount=use.mount or "")
                for job_id in job_ids
            )


def _team_version(
    session: Session, team_id: int, name: str, version: int | None
) -> DatasetVersionModel | None:
    query = (
        select(DatasetVersionModel)
        .join(DatasetModel, DatasetModel.id == DatasetVersionModel.dataset_id)
        .where(DatasetModel.team_id == team_id, DatasetModel.name == name)
    )
    if version is None:
        query = query.order_by(DatasetVersionModel.number.desc())
    else:
        query = query.where(DatasetVersionModel.number == version)
    return session.scalars(query.limit(1)).first()
