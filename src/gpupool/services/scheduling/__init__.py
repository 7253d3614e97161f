"""What the scheduler is given and what it says back to users: snapshots, ETAs, why, storage.

The control loop's snapshot of the pool, its teams and their fair-share usage (``_snapshots``,
``_usage``); the start estimates of waiting jobs (``_eta``); why a job waits and the queue as users
see it (``_why``); how the teams' storage is summed, recorded and enforced (``_storage``: its rules;
the pipeline that runs them is ``gpupool.loops.storage``). It imports ``services.core``,
``cluster``, ``identity`` and ``jobs``; only the control loop and the composition root build on it.
"""

from __future__ import annotations

from gpupool.services.scheduling._eta import EtaPredictor
from gpupool.services.scheduling._snapshots import SnapshotBuilder, gang_json
from gpupool.services.scheduling._storage import (
    NodesFiles,
    StorageScan,
    TeamFiles,
    TeamUsage,
    load_team_files,
    record_usage,
)
from gpupool.services.scheduling._why import show_queue, why_waits

__all__ = [
    "EtaPredictor",
    "SnapshotBuilder",
    "NodesFiles",
    "StorageScan",
    "TeamFiles",
    "TeamUsage",
    "gang_json",
    "load_team_files",
    "record_usage",
    "show_queue",
    "why_waits",
]
