"""Datasets and volumes: a team's immutable, versioned datasets over content-addressed blobs,
and its mutable volumes.

Uploading blobs, planning and committing versions, making one from a job's outputs,
listing, showing, resolving and deleting them (``_datasets``); volumes (``_volumes``);
receiving blobs (``_blobs``) into the store that keeps them (``_stores``: a POSIX
directory or an S3-compatible object store); what a job file's Dataset and Volume documents
make, in two steps (``_documents``); what they need of the server beyond the core ports,
the settings and the executor, in ``_ports``. It imports ``services.core`` and
``identity`` (teams' storage quotas); ``jobs`` builds on it (a submit resolves and records
the datasets and volumes a job uses).
"""

from __future__ import annotations

from gpupool.services.datasets._blobs import INCOMING as DATASET_INCOMING
from gpupool.services.datasets._blobs import blob_path
from gpupool.services.datasets._datasets import (
    FromJob,
    NewVersion,
    attach_uses,
    commit,
    delete_dataset,
    from_job,
    list_datasets,
    load_manifest,
    plan,
    receive_blob,
    resolve,
    resolve_uses,
    show_dataset,
    show_version,
)
from gpupool.services.datasets._documents import (
    ReadyVersion,
    ReadyVolume,
    prepare_version,
    prepare_volume,
    record_version,
    record_volume,
)
from gpupool.services.datasets._gc import BlobsCollected, collect_blobs
from gpupool.services.datasets._stores import BlobStore, blob_store, s3_of
from gpupool.services.datasets._volumes import (
    create_volume,
    delete_volume,
    list_volumes,
    record_volume_usage,
    resolve_volumes,
    show_volume,
    team_volumes,
)

__all__ = [
    "BlobsCollected",
    "BlobStore",
    "blob_store",
    "s3_of",
    "collect_blobs",
    "record_volume_usage",
    "DATASET_INCOMING",
    "FromJob",
    "NewVersion",
    "ReadyVersion",
    "ReadyVolume",
    "attach_uses",
    "blob_path",
    "commit",
    "create_volume",
    "delete_volume",
    "list_volumes",
    "resolve_volumes",
    "show_volume",
    "team_volumes",
    "delete_dataset",
    "from_job",
    "list_datasets",
    "load_manifest",
    "plan",
    "prepare_version",
    "prepare_volume",
    "receive_blob",
    "record_version",
    "record_volume",
    "resolve",
    "resolve_uses",
    "show_dataset",
    "show_version",
]
