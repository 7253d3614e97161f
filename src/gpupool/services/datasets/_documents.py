"""What a job file's Dataset and Volume documents make (``gpupool apply -f``), in two steps
as the environments' are: ``prepare`` with no transaction open (the caller's team, the
manifest read from the store, a job's outputs copied into blobs), then ``record`` in the
file's one transaction, so that a Job after them in the file reads that version or mounts
that volume, and a refused document anywhere in the file leaves none of them made.

A Dataset's version is an uploaded manifest (the CLI uploaded the blobs the team lacked
before it sent the file) or an ended job's outputs. Recorded, a manifest equal to the
dataset's latest version's is that version, not a new one: a file applied twice makes no
copy. A Volume the team has already is that volume (its size is updated when the document
gives one): applying a file again mounts the same volume.

A dry run records the version and the volume too, in the transaction it rolls back, but
does not copy a job's outputs (the version it records has no files), nor asks that the team
hold an upload's blobs: the CLI's dry run uploads the manifest only and says what it would
send; the manifest itself is read and checked (its paths, the limits) all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.datasetrefs import NAME_RULE, is_dataset_name
from gpupool.domain.datasets import Manifest, manifest_bytes, parse_manifest
from gpupool.domain.jobfiles import DatasetBody, VolumeBody
from gpupool.domain.models import source_path
from gpupool.errors import BadModelPath, BlobsMissing, InvalidDatasetName, NotFound
from gpupool.services.core import Principal, Reads
from gpupool.services.datasets._blobs import keep_bytes
from gpupool.services.datasets._datasets import (
    MAX_NAMED_MISSING,
    _check_name,
    _held,
    _hold_in,
    _manifest_of,
    _pack_into_blobs,
    _record,
    _writable_team,
    source_job,
)
from gpupool.services.datasets._ports import Copies, Stores
from gpupool.store.models import (
    DatasetModel,
    DatasetVersionModel,
    JobModel,
    TeamModel,
    VolumeModel,
)

EMPTY = Manifest(files=())
# a dry run's version from a job (its outputs not read): recorded, then rolled back
NOT_READ = "0" * 64


@dataclass(frozen=True)
class ReadyVersion:
    """A dataset's version ready to record: its team, its manifest (hex) and files, and
    the blobs the team is recorded as holding with it (a job's outputs, kept by the server)."""

    name: str
    team_id: int
    manifest: str
    files: Manifest
    description: str | None
    source_job_id: int | None = None
    holds: dict[str, int] = field(default_factory=dict)
    uploaded: bool = True  # from an upload (not a job's outputs)
    # the team must hold every blob (not in a dry run: the real apply's CLI uploads them
    # before it sends the file)
    check_blobs: bool = True


@dataclass(frozen=True)
class ReadyVolume:
    name: str
    team_id: int
    size_bytes: int | None


def prepare_version(ctx: Copies, who: Principal, body: DatasetBody, dry_run: bool) -> ReadyVersion:
    """Step 1 of a Dataset document, with no transaction open: the team it is made for and
    its manifest (an upload's, read and checked; a job's outputs, copied into blobs unless
    ``dry_run``)."""
    _check_name(body.name)
    if body.manifest is not None:
        team_id = _writable_team(ctx, who, body.team)
        manifest = _manifest_of(ctx, team_id, body.manifest)
        return ReadyVersion(
            body.name, team_id, body.manifest, manifest, body.description, check_blobs=not dry_run
        )
    try:
        path = source_path(body.path)
    except ValueError as problem:
        raise BadModelPath(f"{problem}: {BadModelPath.__doc__}", path=body.path) from None
    job_id = body.from_job if isinstance(body.from_job, int) else named_job(ctx, who, body)
    team_id, node = source_job(ctx, who, job_id, body.team)
    if dry_run:  # its outputs are not copied: the version checked has no files
        return ReadyVersion(
            body.name, team_id, NOT_READ, EMPTY, body.description, job_id, uploaded=False
        )
    settings = ctx.settings
    files = _pack_into_blobs(ctx, job_id, node, path)
    data = manifest_bytes(files)
    sha = keep_bytes(settings, data)
    manifest = parse_manifest(data, settings.max_dataset_files, settings.max_dataset_bytes)
    holds = {**manifest.blobs, sha: len(data)}
    return ReadyVersion(
        body.name, team_id, sha, manifest, body.description, job_id, holds, uploaded=False
    )


def record_version(
    session: Session, who: Principal, ready: ReadyVersion, now: float
) -> DatasetVersionModel:
    """Step 2, in the caller's transaction: the dataset's next version (the dataset made
    with its first), or its latest when that one has the same manifest; BlobsMissing when
    an upload's blobs are not all held by the team."""
    if ready.uploaded and ready.check_blobs:
        held = _held(session, ready.team_id, ready.files.blobs)
        wanted = ready.files.blobs.items()
        missing = sorted(sha for sha, size in wanted if held.get(sha) != size)
        if missing:
            raise BlobsMissing(
                f"{len(missing)} of the version's {len(ready.files.blobs)} blobs were not "
                "uploaded (or not by your team): gpupool apply -f uploads them before it "
                "sends the file; through the API, PUT /api/v1/dataset-blobs/SHA256 first",
                missing=missing[:MAX_NAMED_MISSING],
                missing_count=len(missing),
            )
    if ready.holds:
        _hold_in(session, ready.team_id, ready.holds, now)
    latest = _latest(session, ready.team_id, ready.name)
    if latest is not None and latest.manifest == ready.manifest and ready.uploaded:
        return latest
    row = _record(now, session, who, ready.team_id, ready.name, ready.manifest, ready.files)
    row.source_job_id, row.description = ready.source_job_id, ready.description
    session.flush()
    return row


def named_job(ctx: Reads, who: Principal, body: DatasetBody) -> int:
    """The id of the newest job named ``body.from_job`` of the teams ``who`` is a member of
    (of ``body.team`` when given); NotFound, as for a job that does not exist, otherwise."""
    name = str(body.from_job)
    who.require_member()
    with ctx.db.reader() as session:
        query = select(JobModel.id, JobModel.team_id).where(JobModel.name == name)
        if body.team:
            query = query.join(TeamModel, TeamModel.id == JobModel.team_id).where(
                TeamModel.name == body.team
            )
        for job_id, team_id in session.execute(query.order_by(JobModel.id.desc())):
            if team_id in who.team_ids and who.can_act_on_team(team_id):
                return job_id
    raise NotFound(
        f"no job named '{name[:200]}' of your teams: give an ended job's id or name "
        "('gpupool ls' lists them)",
        fields=[{"field": "from_job", "message": "no such job"}],
    )


def prepare_volume(ctx: Stores, who: Principal, body: VolumeBody) -> ReadyVolume:
    """Step 1 of a Volume document: its name checked and the team it is made for."""
    if not is_dataset_name(body.name):
        raise InvalidDatasetName(
            f"'{body.name[:100]}' is not a volume's name: {NAME_RULE}",
            fields=[{"field": "name", "message": NAME_RULE}],
        )
    return ReadyVolume(body.name, _writable_team(ctx, who, body.team), body.size_bytes)


def record_volume(session: Session, who: Principal, ready: ReadyVolume, now: float) -> VolumeModel:
    """Step 2, in the caller's transaction: the team's volume of that name (made, when it
    has none; its size set when the document gives one)."""
    query = select(VolumeModel).where(
        VolumeModel.team_id == ready.team_id, VolumeModel.name == ready.name
    )
    row = session.scalars(query).first()
    if row is None:
        row = VolumeModel(
            team_id=ready.team_id,
            name=ready.name,
            size_limit=ready.size_bytes,
            created_at=now,
            created_by=who.user_id,
        )
        session.add(row)
    elif ready.size_bytes is not None:
        row.size_limit = ready.size_bytes
    session.flush()
    return row


def _latest(session: Session, team_id: int, name: str) -> DatasetVersionModel | None:
    query = (
        select(DatasetVersionModel)
        .join(DatasetModel, DatasetModel.id == DatasetVersionModel.dataset_id)
        .where(DatasetModel.team_id == team_id, DatasetModel.name == name)
        .order_by(DatasetVersionModel.number.desc())
        .limit(1)
    )
    return session.scalars(query).first()
