"""Tunings of the scheduler's settings, as data: what an admin asks (``TuneRequest``: how much
history, the hold-out, trials, objective, guards, apply or dry run) and what a tuning is
(``TuneView``: its state, decision and report). ``services.tuning`` runs them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HOUR = 3600.0
DAY = 86400.0
Objective = Literal["avg_jct", "median_jct", "p95_jct", "avg_wait"]
Guard = Literal["p95_wait", "worst_team_slowdown"]
TuneStatus = Literal["queued", "running", "succeeded", "failed"]
Share = Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)]


class TuneRequest(BaseModel):
    """A tuning: the last ``window`` seconds of history, the last ``holdout`` of them kept to
    check the best few settings the search found on the rest; ``apply``: adopt the chosen
    settings (a new version) when the hold-out improves by 5 % or more and no guard breaks;
    otherwise a dry run that only reports."""

    model_config = ConfigDict(extra="forbid")

    window: float = Field(14 * DAY, ge=2 * HOUR, le=90 * DAY, allow_inf_nan=False)
    holdout: float = Field(7 * DAY, ge=HOUR, le=45 * DAY, allow_inf_nan=False)
    trials: int = Field(60, ge=1, le=1000)
    objective: Objective = "avg_jct"
    guards: dict[Guard, Share] | None = Field(
        None, description="the most each figure may rise on the hold-out (0.1: 10 %)"
    )
    sampler: Literal["tpe", "grid"] = "tpe"
    seed: int = Field(0, ge=0, le=2**31)
    apply: bool = False

    @model_validator(mode="after")
    def _holdout_inside(self) -> TuneRequest:
        if self.holdout >= self.window:
            raise ValueError(
                "holdout: the hold-out is the last part of the window; make it shorter than "
                "the window (e.g. --window 14d --holdout 7d)"
            )
        return self


class TuneView(BaseModel):
    """A tuning: its state; once ended, its decision (adopt, keep, refuse), why, the version
    it made when it adopted, and its whole report (every setting tried and its scores)."""

    id: int
    status: TuneStatus
    source: Literal["admin", "autotune"]
    requested_by: str | None
    options: dict[str, Any]
    decision: Literal["adopt", "keep", "refuse"] | None
    message: str | None
    adopted_version: int | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    report: dict[str, Any] | None = None
    checked: dict[str, Any] | None = None


class FidelityView(BaseModel):
    """A replay of the pool's recent history under the live settings against what really
    happened: each job's JCT error, their median, and the jobs of the largest errors (by
    gpupool job id). A tuning is refused while the median error is above ``limit``."""

    since: float
    until: float
    jobs: int
    median_error: float | None
    p90_error: float | None
    mean_error: float | None
    limit: float
    trusted: bool
    worst: list[dict[str, Any]]
