"""What the scheduler is given and what it says back to users: snapshots, ETAs, why, storage.

The control loop's snapshot of the pool, its teams and their fair-share usage
(``_snapshots``, ``_usage``); the start estimates of waiting jobs (``_eta``); why a job waits
and the queue as users see it (``_why``); the teams' storage scan and the database's disk
reserve (``_storage``). It imports ``services.core``, ``cluster``, ``identity`` and ``jobs``;
only the control loop and the composition root build on it.
"""

from __future__ import annotations

from gpupool.services.scheduling._eta import EtaPredictor
from gpupool.services.scheduling._snapshots import SnapshotBuilder, gang_json
from gpupool.services.scheduling._storage import StorageWatch
from gpupool.services.scheduling._why import show_queue, why_waits

__all__ = [
    "EtaPredictor",
    "SnapshotBuilder",
    "StorageWatch",
    "gang_json",
    "show_queue",
    "why_waits",
]
