"""Collecting the dataset store: the blobs no version references any more.

Deleting a version (or a dataset) leaves its blobs in the store, since other versions, of any
team, may share them. A sweep (the storage pipeline runs it every ``dataset_gc_seconds``)
reads every version's manifest and then:

1. removes each blob file that no version references and no team holds, when it has not
   changed for ``dataset_blob_grace_seconds`` (an upload keeps a blob, then records that
   its team holds it: a blob kept a moment ago by an upload in flight is left to it);
2. forgets that a team holds a blob none of its own versions references, when it was
   uploaded longer than that ago (an upload's blobs are held before their version is
   committed: the grace is what an upload may take between its first blob and its
   commit). The team's storage usage drops by it at the next scan, and its file goes at the
   next sweep, when no other team holds it (step 1 comes first: a commit that raced this
   step has long finished by then).

What a sweep removed is logged (one line, for the admin) and returned.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import delete, select

from gpupool.domain.units import format_bytes
from gpupool.services.datasets._blobs import remove_blob, stored_blobs
from gpupool.services.datasets._datasets import IN_CHUNKS, load_manifest
from gpupool.services.datasets._ports import Stores
from gpupool.store.models import DatasetBlobModel, DatasetModel, DatasetVersionModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlobsCollected:
    """What one sweep removed: blob files and their bytes, and the teams' holdings it
    forgot (a team's row for a blob none of its versions references)."""

    blobs: int = 0
    bytes: int = 0
    holdings: int = 0

    def __str__(self) -> str:
        return (
            f"removed {self.blobs:,} blob(s) no dataset version references "
            f"({format_bytes(self.bytes)} freed) and {self.holdings:,} team holding(s) of "
            "blobs no version of the team references"
        )


def collect_blobs(ctx: Stores) -> BlobsCollected:
    """One sweep of the dataset store (see the module's docstring). Slow (it reads every
    manifest and lists the store): run it from a worker thread or a loop of its own."""
    now = ctx.clock.now()  # the rows' times are the clock's; the files' are the disk's
    grace = ctx.settings.dataset_blob_grace_seconds
    changed_before = time.time() - grace
    with ctx.db.reader() as session:
        versions = list(
            session.execute(
                select(DatasetModel.team_id, DatasetVersionModel.manifest).join(
                    DatasetModel, DatasetModel.id == DatasetVersionModel.dataset_id
                )
            )
        )
        holdings = list(
            session.execute(
                select(
                    DatasetBlobModel.id, DatasetBlobModel.team_id, DatasetBlobModel.sha256
                ).where(DatasetBlobModel.created_at < now - grace)
            )
        )
        held = set(session.scalars(select(DatasetBlobModel.sha256).distinct()))
    referenced: dict[int, set[str]] = {}
    for team_id, manifest in versions:
        try:
            files = load_manifest(ctx.settings, manifest).blobs
        except Exception as problem:  # noqa: BLE001 - a store that lost one: touch nothing
            log.error("dataset blobs: not collected: the manifest %s: %s", manifest, problem)
            return BlobsCollected()
        referenced.setdefault(team_id, set()).update(files)
        referenced[team_id].add(manifest)
    anywhere = set().union(*referenced.values()) if referenced else set()
    removed, freed = 0, 0
    for sha, changed in list(stored_blobs(ctx.settings)):
        if sha in anywhere or sha in held or changed >= changed_before:
            continue
        size = remove_blob(ctx.settings, sha, changed_before)
        removed, freed = removed + (size > 0), freed + size
    unreferenced = [
        row_id for row_id, team_id, sha in holdings if sha not in referenced.get(team_id, ())
    ]
    for start in range(0, len(unreferenced), IN_CHUNKS):
        with ctx.db.session() as session:
            chunk = unreferenced[start : start + IN_CHUNKS]
            session.execute(delete(DatasetBlobModel).where(DatasetBlobModel.id.in_(chunk)))
    done = BlobsCollected(removed, freed, len(unreferenced))
    if removed or unreferenced:
        log.warning("dataset blobs: %s", done)
    return done
