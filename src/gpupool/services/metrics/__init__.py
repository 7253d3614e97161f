"""Jobs' training metrics and GPU samples: read, compared, summarised, and ingested.

Reading, comparing and summarising a job's metrics and its GPUs' busy share (``_metrics``); how what
the runners wrote is read and kept in the database (``_ingest``: its rules; the pipeline that runs
them, off the control loop, is ``gpupool.loops.ingest``). It imports ``services.core`` and
``services.jobs``; models and notebooks build on it.
"""

from __future__ import annotations

from gpupool.services.metrics._ingest import (
    Batch,
    Source,
    close_empty,
    finished,
    is_new,
    keep,
    nothing_ever,
    read_batch,
    sources,
)
from gpupool.services.metrics._metrics import (
    MAX_POINTS,
    compare,
    final_values,
    gpu_busy,
    read_metrics,
    summarize,
)

__all__ = [
    "Batch",
    "MAX_POINTS",
    "Source",
    "close_empty",
    "compare",
    "final_values",
    "finished",
    "gpu_busy",
    "is_new",
    "keep",
    "nothing_ever",
    "read_batch",
    "read_metrics",
    "sources",
    "summarize",
]
