"""What every capability of ``gpupool.services`` may use: the ports of the running server.

``Reads``, ``Writes``, ``Tells``, ``Submits`` and ``LoopSide`` are what a service call sees of
the server and its control loop (``TokenMemory``, ``Throttle`` and ``ClusterSide``: of the
token cache, the sign-in throttle and the Ray pool, for the capabilities' own ports);
``Principal`` is who asks; ``Forecast`` and its parts are the loop's start estimates; the clock, the
loop's counters and the data directory's lock and reserve. This package imports no capability
package, so each of them may import it without a cycle.
"""

from __future__ import annotations

from gpupool.services.core._access import Principal
from gpupool.services.core._clock import SystemClock
from gpupool.services.core._context import (
    ClusterSide,
    LoopSide,
    NodeRemoved,
    Reads,
    Submits,
    Tells,
    Throttle,
    TokenMemory,
    Writes,
)
from gpupool.services.core._datadir import DataDirLock, Reserve, current_holder
from gpupool.services.core._estimates import NOT_YET, OUTRUN, Bounds, Duration, Estimate, Forecast
from gpupool.services.core._loop_stats import LoopStats, StatsSnapshot

__all__ = [
    "Bounds",
    "ClusterSide",
    "DataDirLock",
    "Duration",
    "Estimate",
    "Forecast",
    "LoopSide",
    "LoopStats",
    "NOT_YET",
    "NodeRemoved",
    "OUTRUN",
    "Principal",
    "Reads",
    "Reserve",
    "StatsSnapshot",
    "Submits",
    "SystemClock",
    "Tells",
    "Throttle",
    "TokenMemory",
    "Writes",
    "current_holder",
]
