"""Code snapshots: receive an upload, store it once by content, record who may run it.

An archive is kept once, at ``<data_dir>/code/sha256/<hex>.tar.gz``: it is received into a
temporary file while its SHA-256 is computed, checked (its name, the archive format, the
limits: ``executors.code.inspect``), flushed to disk and renamed into place, and only then
acknowledged, so an upload that was answered survives a crash of the server or the machine.

The right to run a snapshot is a row per uploader (``CodeUploadModel``): a job may name a
snapshot that its submitter uploaded, or that a member of the job's team did. Knowing a ref
gives nothing more: a snapshot one may not use is answered exactly as one that does not exist
(``code_not_found``). The same bytes uploaded by someone else are stored no second time; the
upload only records that they, too, may run them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.code import CodeLimits, CodeSummary, digest_of, ref_of
from gpupool.domain.units import format_bytes
from gpupool.domain.views import CodeLimitsView, CodeView
from gpupool.errors import CodeHashMismatch, CodeNotFound, CodeTooLarge
from gpupool.executors import code as archives
from gpupool.services import identity
from gpupool.services.core import Principal, Reads, Submits, Writes
from gpupool.services.jobs._incoming import Incoming
from gpupool.settings import Settings
from gpupool.store.models import CodeUploadModel, MembershipModel

INCOMING = "incoming"  # uploads being received, below the code directory


# -- what the API calls ------------------------------------------------------------------------


def limits(ctx: Submits) -> CodeLimitsView:
    """What this server takes of one snapshot."""
    found = ctx.settings.code_limits()
    return CodeLimitsView(
        max_bytes=found.archive_bytes,
        max_unpacked_bytes=found.unpacked_bytes,
        max_entries=found.entries,
    )


def show_code(ctx: Reads, who: Principal, ref: str) -> CodeView:
    """The snapshot ``ref`` if ``who`` uploaded it (a client asks before uploading), else
    CodeNotFound, whether it exists or not."""
    who.require_member()
    with ctx.db.reader() as session:
        query = select(CodeUploadModel).where(
            CodeUploadModel.ref == ref, CodeUploadModel.user_id == who.user_id
        )
        row = session.scalars(query).first()
        if row is None:
            raise _not_found(ref)
        return code_view(row)


async def receive(
    ctx: Submits,
    who: Principal,
    chunks: AsyncIterator[bytes],
    expected: str | None = None,
    declared_bytes: int | None = None,
) -> CodeView:
    """Store the archive read from ``chunks`` for ``who``; ``expected``: the ref it must
    have (CodeHashMismatch if not). CodeTooLarge as soon as it is known to be over the
    limit (``declared_bytes``: the size the client announced), BadCodeArchive when it breaks
    the format, StorageFull when the disk is."""
    who.require_member()
    await asyncio.to_thread(_refuse_over_quota, ctx, who)
    found = ctx.settings.code_limits()
    if declared_bytes is not None and declared_bytes > found.archive_bytes:
        raise too_large(declared_bytes, found)
    with Incoming.open(
        ctx.settings.code_dir / INCOMING,
        prefix="upload",
        max_bytes=found.archive_bytes,
        too_large=lambda size: too_large(size, found),
        what="code snapshot storage",
    ) as incoming:
        async for chunk in chunks:
            incoming.write(chunk)
        return await asyncio.to_thread(_keep, ctx, who, incoming, expected, found)


# -- the steps ---------------------------------------------------------------------------------


def archive_path(settings: Settings, ref: str) -> Path:
    """Where the archive of ``ref`` is kept."""
    return settings.code_dir / "sha256" / f"{digest_of(ref)}.tar.gz"


def require_usable(session: Session, who: Principal, ref: str, team_id: int, team: str) -> None:
    """Refuse (CodeNotFound) a snapshot that neither ``who`` nor a member of the job's team
    uploaded."""
    members = select(MembershipModel.user_id).where(MembershipModel.team_id == team_id)
    query = select(CodeUploadModel.id).where(
        CodeUploadModel.ref == ref,
        or_(CodeUploadModel.user_id == who.user_id, CodeUploadModel.user_id.in_(members)),
    )
    if session.scalars(query.limit(1)).first() is None:
        raise _not_found(ref, f" for a job of team {team}")


def snapshot(session: Session, ref: str | None) -> CodeView | None:
    """What the snapshot ``ref`` holds, as its first upload recorded it; None without one."""
    if ref is None:
        return None
    query = select(CodeUploadModel).where(CodeUploadModel.ref == ref).order_by(CodeUploadModel.id)
    row = session.scalars(query.limit(1)).first()
    return code_view(row) if row is not None else None


def code_view(row: CodeUploadModel) -> CodeView:
    return CodeView(
        ref=row.ref, size_bytes=row.size_bytes, files=row.files, unpacked_bytes=row.unpacked_bytes
    )


def too_large(size: int, found: CodeLimits) -> CodeTooLarge:
    return CodeTooLarge(
        f"the code snapshot is {format_bytes(size)}, more than the "
        f"{format_bytes(found.archive_bytes)} this server takes (GPUPOOL_MAX_CODE_BYTES): leave "
        "big files out with a .gpupoolignore (gitignore syntax), or keep the code on a shared "
        "file system and give its path with --workdir",
        size_bytes=size,
        max_bytes=found.archive_bytes,
    )


def _keep(
    ctx: Submits, who: Principal, incoming: Incoming, expected: str | None, found: CodeLimits
) -> CodeView:
    """Check the received archive, keep it (once), and record ``who``'s right to run it."""
    ref = ref_of(incoming.hexdigest())
    if expected is not None and ref != expected:
        raise CodeHashMismatch(
            f"the archive received has the SHA-256 {ref}, not {expected}: it changed on the "
            "way, or was named after other bytes; upload it under its own name",
            ref=ref,
        )
    incoming.finish()
    summary = archives.inspect(incoming.path, found)
    final = archive_path(ctx.settings, ref)
    if not final.exists():
        incoming.publish(final)
    return _record(ctx, who, ref, incoming.size, summary)


def _record(ctx: Writes, who: Principal, ref: str, size: int, summary: CodeSummary) -> CodeView:
    row = CodeUploadModel(
        ref=ref,
        user_id=who.user_id,
        uploaded_at=ctx.clock.now(),
        size_bytes=size,
        files=summary.files,
        unpacked_bytes=summary.unpacked_bytes,
    )
    with ctx.db.session() as session:
        query = select(CodeUploadModel.id).where(
            CodeUploadModel.ref == ref, CodeUploadModel.user_id == who.user_id
        )
        if session.scalars(query).first() is None:
            # the same user's upload of the same bytes at the same time may win the insert
            with contextlib.suppress(IntegrityError), session.begin_nested():
                session.add(row)
    return code_view(row)


def _refuse_over_quota(ctx: Reads, who: Principal) -> None:
    """StorageQuotaExceeded while a team of ``who`` is over its storage quota: an upload
    counts for each team of its uploader."""
    with ctx.db.reader() as session:
        identity.refuse_for_member(session, who.team_ids)


def _not_found(ref: str, where: str = "") -> CodeNotFound:
    return CodeNotFound(
        f"no code snapshot {ref} that you may use{where}: upload it first (gpupool run --code "
        "does; PUT /api/v1/code/{ref}); a snapshot is yours to use once you, or a member of "
        "the job's team, uploaded it",
        fields=[{"field": "code", "message": "no such snapshot that you may use"}],
    )
