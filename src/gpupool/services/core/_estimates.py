"""What a forecast says: estimated starts of waiting jobs, each with why it has one or not.

These are the results of the ETA predictor (``services.scheduling``), kept apart from it
(it reads the database and runs the scheduler forward) so that anything may hold a forecast
without depending on how it is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.domain.units import format_duration

NOT_YET = "it was submitted after the last estimate; ask again in a few seconds"
OUTRUN = (
    "the running jobs have all outrun their estimates: those it waits for have no "
    "--max-runtime and have run longer than their users' and teams' finished jobs, so when "
    "one ends is not known (a job run with --max-runtime is counted to end by then)"
)


@dataclass(frozen=True)
class Bounds:
    """How much work one forecast may do."""

    max_jobs: int = 300
    horizon: float = 7 * 86400.0
    max_cycles: int = 300
    refresh_seconds: float = 5.0


@dataclass(frozen=True)
class Duration:
    """How long a job is assumed to run, and why (``basis``, said in words by ``text``)."""

    seconds: float
    basis: str  # "max_runtime", "user_median", "team_median", "default"

    @property
    def text(self) -> str:
        length = format_duration(round(self.seconds))
        return {
            "max_runtime": f"{length}, its max runtime",
            "user_median": f"{length}, the median of its user's finished jobs",
            "team_median": f"{length}, the median of its team's finished jobs",
        }.get(self.basis, f"{length}, the default for a job with no max runtime and no history")


@dataclass(frozen=True)
class Estimate:
    """One job's estimated start (``at``, epoch seconds) or why there is none."""

    at: float | None
    unknown: str | None
    duration: Duration | None
    computed_at: float


@dataclass(frozen=True)
class Forecast:
    """Start estimates of the waiting jobs at ``computed_at``."""

    computed_at: float
    starts: Mapping[int, float]
    durations: Mapping[int, Duration]
    beyond_cap: frozenset[int]
    stopped: str
    bounds: Bounds
    on_guesses: frozenset[int] = frozenset()  # their start rests on outrun jobs' ends only

    def estimate(self, job_id: int) -> Estimate:
        duration = self.durations.get(job_id)
        if job_id in self.starts and job_id not in self.on_guesses:
            return Estimate(self.starts[job_id], None, duration, self.computed_at)
        return Estimate(None, self._why_unknown(job_id), duration, self.computed_at)

    def knows(self, job_id: int) -> bool:
        return job_id in self.durations or job_id in self.beyond_cap

    def _why_unknown(self, job_id: int) -> str:
        bounds = self.bounds
        if job_id in self.beyond_cap:
            return (
                f"more than {bounds.max_jobs} jobs wait; only the first {bounds.max_jobs} in "
                "queue order are simulated"
            )
        if job_id not in self.durations:
            return NOT_YET
        if job_id in self.on_guesses:
            return OUTRUN
        if self.stopped == "stuck":
            return "it cannot start with the pool as it is: no running job would free room"
        if self.stopped == "cycles":
            return f"it did not start within the {bounds.max_cycles} scheduling cycles simulated"
        return f"it does not start within the next {format_duration(bounds.horizon)} simulated"
