"""Self-tuning: choose the scheduler's settings by replaying a site's own history through
its own scheduler (``tune``), and measure how well a replay reproduces that history
(``fidelity``). Offline and pure: a trace and a pool in, a JSON-able report out; the
server's wiring (export, apply, watch) lives with the server.
"""

from gpupool.sim.tuning._replay import FIDELITY_LIMIT, fidelity, fidelity_of
from gpupool.sim.tuning._report import (
    Fidelity,
    JobError,
    Rescored,
    Scores,
    Space,
    Trial,
    TuneReport,
)
from gpupool.sim.tuning._search import (
    ADOPT_MIN,
    DEFAULT_GUARDS,
    GUARDED,
    OBJECTIVES,
    SAMPLERS,
    tune,
)
from gpupool.sim.tuning._space import apply_knobs, knobs_of

__all__ = [
    "ADOPT_MIN",
    "DEFAULT_GUARDS",
    "FIDELITY_LIMIT",
    "GUARDED",
    "OBJECTIVES",
    "SAMPLERS",
    "Fidelity",
    "JobError",
    "Rescored",
    "Scores",
    "Space",
    "Trial",
    "TuneReport",
    "apply_knobs",
    "fidelity",
    "fidelity_of",
    "knobs_of",
    "tune",
]
