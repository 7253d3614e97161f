"""Self-tuning: the scheduler's settings chosen by replaying the pool's own history through
its own scheduler (``gpupool.sim.tuning``). The history as a trace (``_history``: what
``gpupool history export`` gives); tunings asked, queued and run (``_tunes``), adopting a
new version of the settings (``services.schedsettings``) when the hold-out improves; the
nightly autotune and the rollback check a week after an adoption (``_watch``). The tuning
watch (``gpupool.loops.tuning``) runs them. It imports ``services.core``, ``identity`` and
``schedsettings``.
"""

from __future__ import annotations

from gpupool.services.tuning._history import COLUMNS, PastJob, csv_text, past_jobs
from gpupool.services.tuning._tunes import (
    Execute,
    export,
    fidelity,
    in_this_process,
    interrupted,
    list_tunes,
    next_queued,
    request,
    run,
    show,
)
from gpupool.services.tuning._watch import autotune_due, check_adoptions, queue_autotune

__all__ = [
    "COLUMNS",
    "Execute",
    "PastJob",
    "autotune_due",
    "check_adoptions",
    "csv_text",
    "export",
    "fidelity",
    "in_this_process",
    "interrupted",
    "list_tunes",
    "next_queued",
    "past_jobs",
    "queue_autotune",
    "request",
    "run",
    "show",
]
