"""What a tuning run says: every trial, the few re-scored on the hold-out, the choice and why.

Everything here is plain data (frozen dataclasses of numbers, strings, lists and dicts), so
that ``to_dict`` gives JSON as it is: the server stores it with the settings' version it
adopted, and its rollback watch compares the next week's real figure to ``predicted``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Knobs = dict[str, Any]  # a knob's name -> its value, JSON-able (``_space``)
Decision = Literal["adopt", "keep", "refuse"]


@dataclass(frozen=True)
class Scores:
    """The figures of one replay, over the jobs it scores (the censored ones left out).

    Times in seconds. ``worst_team_slowdown``: the highest of the teams' mean slowdowns
    (JCT over run time). ``unscheduled``: jobs the replay could never start.
    """

    jobs: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    avg_wait: float
    p95_wait: float
    worst_team_slowdown: float
    preemptions: int
    unscheduled: int

    def objective(self, name: str) -> float:
        return float(getattr(self, name))


@dataclass(frozen=True)
class Trial:
    """One setting tried on the search window; trial 0 is the base policy's."""

    number: int
    knobs: Knobs
    window: Scores


@dataclass(frozen=True)
class Rescored:
    """One of the best few trials, replayed on the hold-out against the base.

    ``improvement``: how much lower its objective is than the base's, as a share of the
    base's (0.08: 8 % lower). ``guards``: each guarded figure's relative change against the
    base (0.12: 12 % higher, worse); ``broken``: the guards whose limit it passed.
    """

    number: int
    knobs: Knobs
    holdout: Scores
    improvement: float
    guards: dict[str, float]
    broken: list[str]


@dataclass(frozen=True)
class JobError:
    """A job's replayed JCT against the one really observed; ``error`` is relative."""

    job_id: int
    observed: float
    replayed: float
    error: float


@dataclass(frozen=True)
class Fidelity:
    """How well a replay reproduces what really happened, per job that ended.

    ``jobs``: jobs compared (those with an observed JCT, not censored, that ran in the
    replay); ``median_error``: the median of their relative JCT errors (None: no job to
    compare); ``worst``: the jobs of the largest errors, largest first.
    """

    jobs: int
    median_error: float | None
    p90_error: float | None
    mean_error: float | None
    worst: list[JobError]
    limit: float

    @property
    def trusted(self) -> bool:
        """Whether a tuning may rely on this replay (median error within the limit)."""
        return self.median_error is not None and self.median_error <= self.limit

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "trusted": self.trusted}


@dataclass(frozen=True)
class Space:
    """What was searched: each knob's values (or range), and the knobs left out, why."""

    sampler: str
    knobs: dict[str, str]
    left_out: dict[str, str]
    grid_points: int | None = None  # the grid's size ("grid" only)


@dataclass(frozen=True)
class TuneReport:
    """The outcome of ``tune``, JSON-serialisable with ``to_dict``.

    ``decision``: "adopt" (``chosen`` improves the hold-out's objective by at least
    ``ADOPT_MIN`` and breaks no guard), "keep" (the base stays: ``reason`` says why) or
    "refuse" (the replay does not reproduce the history well enough, or nothing to tune
    on). ``predicted``: the objective the replay predicts on the hold-out for the settings
    now in force (``chosen``'s when adopted, else the base's), which the server's rollback
    watch compares with the real next week.
    """

    objective: str
    decision: Decision
    reason: str
    chosen: Knobs | None
    predicted: float | None
    base: Knobs
    base_holdout: Scores | None
    trials: list[Trial]
    rescored: list[Rescored]
    fidelity: Fidelity | None
    space: Space
    window: tuple[float, float]
    holdout: tuple[float, float]
    jobs: dict[str, int] = field(default_factory=dict)  # window, holdout, censored
    guards: dict[str, float] = field(default_factory=dict)  # the limits applied
    replays: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fidelity"] = self.fidelity.to_dict() if self.fidelity is not None else None
        return data
