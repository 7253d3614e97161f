"""Jobs' training metrics and GPU samples: read, compared, summarised, and ingested.

Reading, comparing and summarising a job's metrics and its GPUs' busy share (``_metrics``);
the ingester that copies what the runners wrote into the database, off the control loop
(``_ingest``). It imports ``services.core`` and ``services.jobs``; models and notebooks
build on it.
"""

from __future__ import annotations

from gpupool.services.metrics._ingest import Ingester
from gpupool.services.metrics._metrics import (
    MAX_POINTS,
    compare,
    final_values,
    gpu_busy,
    read_metrics,
    summarize,
)

__all__ = [
    "Ingester",
    "MAX_POINTS",
    "compare",
    "final_values",
    "gpu_busy",
    "read_metrics",
    "summarize",
]
