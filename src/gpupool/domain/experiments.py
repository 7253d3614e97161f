"""Experiments: a hyper-parameter search whose trials are ordinary jobs.

An experiment names what to optimise (``objective``: a metric its trials report through
``gpupool.metrics.log``, and a direction), the space to search (``parameters``), how to pick
the next point (``sampler``: Optuna's random, grid, TPE, CMA-ES or quasi-Monte Carlo), when to
stop a trial early (``stopping``: asynchronous successive halving, Hyperband, the median rule,
or none) and the trial: a job spec whose strings may hold ``${params.NAME}``. Each trial is a
job of the experiment's team (sandbox, quotas, fair share, preemption, checkpoints) that sees
its point in ``GPUPOOL_PARAMS`` (JSON) and its number in ``GPUPOOL_TRIAL_ID``.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpupool.domain.readmodel import View
from gpupool.domain.text import STORABLE

MAX_PARAMETERS = 50
MAX_TRIALS = 10_000
MAX_CHOICES = 1000
MAX_GRID_POINTS = 100_000  # along one dimension: a step that makes more is a typo
METRIC_NAME = r"^[A-Za-z0-9_./-]{1,100}$"
PARAM_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
# ${params.NAME} in a trial's strings; Katib's ${trialParameters.NAME} is read as the same
PLACEHOLDER = re.compile(r"\$\{params\.([A-Za-z_][A-Za-z0-9_]*)\}")


class ExperimentStatus(StrEnum):
    RUNNING = "running"  # asks for trials while it has room
    PAUSED = "paused"  # asks for none; its running trials go on and are still judged
    SUCCEEDED = "succeeded"  # max_trials ended, or the goal was reached
    FAILED = "failed"  # more than max_failed trials failed
    STOPPED = "stopped"  # a user stopped it; its trials were cancelled

    @property
    def is_final(self) -> bool:
        return self in (
            ExperimentStatus.SUCCEEDED,
            ExperimentStatus.FAILED,
            ExperimentStatus.STOPPED,
        )


class TrialState(StrEnum):
    PENDING = "pending"  # its job waits for the scheduler (again, after a preemption)
    RUNNING = "running"
    COMPLETED = "completed"  # its job succeeded and reported the objective
    EARLY_STOPPED = "early_stopped"  # stopped at a rung: its GPUs went back at once
    FAILED = "failed"  # its job failed, or ended without reporting the objective
    CANCELLED = "cancelled"  # cancelled by a user, or with its experiment

    @property
    def is_final(self) -> bool:
        return self not in (TrialState.PENDING, TrialState.RUNNING)


class Parameter(BaseModel):
    """One dimension of the search: a float or int in [low, high] (``log``: sampled on a log
    scale; ``step``: on a grid of that step), or one of ``choices``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["float", "int", "categorical"]
    low: float | None = Field(default=None, allow_inf_nan=False)
    high: float | None = Field(default=None, allow_inf_nan=False)
    log: bool = False
    step: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    choices: list[Annotated[str, STORABLE] | float | bool] | None = Field(
        default=None, min_length=1, max_length=MAX_CHOICES
    )

    @model_validator(mode="after")
    def _fits(self) -> Parameter:
        if self.type == "categorical":
            return self._categorical()
        if self.choices is not None:
            raise ValueError(f"choices are for type categorical, not {self.type}")
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} parameter needs low and high")
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) is above high ({self.high:g})")
        if self.log and (self.low <= 0 or self.step is not None):
            raise ValueError("log needs low above 0 and no step")
        if self.type == "int":
            self._whole()
        if self.step is not None and (self.high - self.low) / self.step >= MAX_GRID_POINTS:
            raise ValueError(
                f"step {self.step:g} makes more than {MAX_GRID_POINTS:,} values from low to "
                "high: use a larger step"
            )
        return self

    def _categorical(self) -> Parameter:
        if not self.choices:
            raise ValueError("a categorical parameter needs choices")
        if any(v is not None for v in (self.low, self.high, self.step)) or self.log:
            raise ValueError("a categorical parameter has choices only (no low, high, step, log)")
        if len({repr(c) for c in self.choices}) != len(self.choices):
            raise ValueError("choices repeat a value")
        return self

    def _whole(self) -> None:
        for name in ("low", "high", "step"):
            value = getattr(self, name)
            if value is not None and not float(value).is_integer():
                raise ValueError(f"{name} of an int parameter is a whole number, not {value:g}")

    def grid_size(self) -> int:
        """How many values ``grid`` gives, counted without making them."""
        if self.type == "categorical":
            return len(self.choices or [])
        assert self.low is not None and self.high is not None
        step = self.step or 1
        return math.floor((self.high - self.low) / step + 1e-9) + 1

    def grid(self) -> list[Any]:
        """Every value of a grid search along this dimension (``step``: low, low+step, ...
        up to high, rounded so that 0.1 + 0.2 steps land on their decimals)."""
        if self.type == "categorical":
            return list(self.choices or [])
        assert self.low is not None and self.high is not None
        step = self.step or (1 if self.type == "int" else None)
        if step is None:
            raise ValueError("a float parameter on a grid needs a step")
        count = math.floor((self.high - self.low) / step + 1e-9) + 1
        digits = _decimals(self.low, step)
        values = [round(self.low + i * step, digits) for i in range(count)]
        return [int(v) for v in values] if self.type == "int" else values


def _decimals(*numbers: float) -> int:
    """Enough decimals to write each number as given (0.005 -> 3), at most 12."""
    return max(min(12, max(0, -math.floor(math.log10(abs(n)))) + 6) if n else 0 for n in numbers)


class Objective(BaseModel):
    """The metric trials report (``gpupool.metrics.log(val_loss=...)``) and which way is
    better; ``goal``: the experiment succeeds once a trial's value reaches it."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(pattern=METRIC_NAME)
    direction: Literal["minimize", "maximize"] = "minimize"
    goal: float | None = Field(default=None, allow_inf_nan=False)

    def better(self, a: float, b: float) -> bool:
        """True when ``a`` is strictly better than ``b``."""
        return a < b if self.direction == "minimize" else a > b

    def reached(self, value: float) -> bool:
        if self.goal is None:
            return False
        return value <= self.goal if self.direction == "minimize" else value >= self.goal


class Sampler(BaseModel):
    """How the next trial's point is picked (Optuna's samplers); ``seed``: the same seed
    gives the same points, trial by trial, whatever order trials end in (for random, grid
    and qmc; tpe and cmaes also learn from the trials that have ended when asked)."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["random", "grid", "tpe", "cmaes", "qmc"] = "tpe"
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)


class Stopping(BaseModel):
    """When a trial is stopped early, judged on the objective at points of ``time_metric``
    (``step``: the step trials report with; or a metric reported beside the objective, such
    as ``epoch``).

    * ``asha``: asynchronous successive halving; rungs at ``grace * reduction_factor**k`` up
      to ``max_time``; at each, a trial goes on only in the best ``1/reduction_factor`` of
      the trials numbered up to it that reached that rung.
    * ``hyperband``: Optuna's Hyperband over several such brackets (``grace``..``max_time``).
    * ``median``: Optuna's median rule: stopped when worse than the median of earlier trials
      at the same point, once ``min_trials`` have reported and after ``grace``.
    """

    model_config = ConfigDict(extra="forbid")

    name: Literal["asha", "hyperband", "median", "none"] = "none"
    time_metric: str = Field(default="step", pattern=METRIC_NAME)
    max_time: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    grace: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    reduction_factor: float = Field(default=3.0, ge=2, le=100, allow_inf_nan=False)
    min_trials: int = Field(default=1, ge=1, le=MAX_TRIALS)

    @model_validator(mode="after")
    def _budget(self) -> Stopping:
        if self.name in ("asha", "hyperband"):
            if self.max_time is None:
                raise ValueError(f"{self.name} needs max_time: the time_metric of a full trial")
            if self.grace <= 0 or self.grace >= self.max_time:
                raise ValueError("grace is the first rung: above 0 and below max_time")
        return self

    def rungs(self) -> list[float]:
        """ASHA's rungs: ``grace * reduction_factor**k`` below ``max_time``."""
        if self.max_time is None:
            return []
        rungs, at = [], self.grace
        while at < self.max_time and len(rungs) < 64:
            rungs.append(at)
            at *= self.reduction_factor
        return rungs


class ExperimentSpec(BaseModel):
    """An experiment as its user submitted it (the body of ``POST /api/v1/experiments``,
    a job file's kind Experiment); stored as versioned JSON."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    name: Annotated[str, Field(min_length=1, max_length=200), STORABLE]
    team: Annotated[str, Field(max_length=100), STORABLE] | None = None
    description: Annotated[str, Field(max_length=2000), STORABLE] | None = None
    objective: Objective
    parameters: dict[Annotated[str, Field(pattern=PARAM_NAME)], Parameter] = Field(
        min_length=1, max_length=MAX_PARAMETERS
    )
    sampler: Sampler = Field(default_factory=Sampler)
    stopping: Stopping = Field(default_factory=Stopping)
    max_trials: int = Field(default=20, ge=1, le=MAX_TRIALS)
    max_concurrent: int = Field(default=2, ge=1, le=1000)
    max_failed: int | None = Field(
        default=None, ge=0, le=MAX_TRIALS, description="fail once more trials failed (None: 3)"
    )
    trial: dict[str, Any] = Field(
        description="the job each trial runs (the fields of POST /api/v1/jobs); its strings "
        "may hold ${params.NAME}, written out as text (a number field of only a placeholder "
        "reads it as its number)"
    )

    @field_validator("trial")
    @classmethod
    def _trial_placeholders(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in ("team", "array", "depends_on"):
            if key in value:
                raise ValueError(
                    f"trial.{key}: "
                    + (
                        "a trial runs in the experiment's team: give team on the experiment"
                        if key == "team"
                        else "not for a trial (each trial is one job the experiment makes)"
                    )
                )
        return value

    @model_validator(mode="after")
    def _known_placeholders(self) -> ExperimentSpec:
        unknown = sorted(set(placeholders(self.trial)) - set(self.parameters))
        if unknown:
            raise ValueError(
                f"trial uses ${{params.{unknown[0]}}}, which is not a parameter: add it to "
                "parameters, or fix the name"
            )
        if self.sampler.name == "grid":
            for name, parameter in self.parameters.items():
                if parameter.type == "float" and parameter.step is None:
                    raise ValueError(f"parameters.{name}: a grid search needs a step")
                if parameter.grid_size() > MAX_GRID_POINTS:
                    raise ValueError(
                        f"parameters.{name}: more than {MAX_GRID_POINTS:,} grid values: give "
                        "a step, or a narrower range"
                    )
        return self

    @property
    def failures_allowed(self) -> int:
        return 3 if self.max_failed is None else self.max_failed


def verdict_text(rung: int, at: float, time_metric: str, rank: int, of: int, keep: int) -> str:
    """A rung's verdict as users read it (``gpupool why``, a trial's message)."""
    fate = "continues" if rank <= keep else "stopped"
    return (
        f"rung {rung} ({time_metric} {at:g}): rank {rank} of {of}, the top {keep} continue; {fate}"
    )


def placeholders(value: Any) -> list[str]:
    """The parameter names a trial's template refers to, wherever they are."""
    if isinstance(value, str):
        return PLACEHOLDER.findall(value)
    if isinstance(value, dict):
        return [n for v in value.values() for n in placeholders(v)]
    if isinstance(value, list):
        return [n for v in value for n in placeholders(v)]
    return []


def fill(value: Any, params: dict[str, Any]) -> Any:
    """The template with each ``${params.NAME}`` replaced by the value written out (0.01,
    32, adam, true): a number field given only a placeholder reads it as its number."""
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: _text(params[m.group(1)]), value)
    if isinstance(value, dict):
        return {k: fill(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, params) for v in value]
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


# -- read models ---------------------------------------------------------------------------------


class TrialView(View):
    """One trial: its point, its job, where it stands and what was decided about it."""

    number: int
    job_id: int | None
    state: TrialState
    params: dict[str, Any]
    rung: int | None = Field(description="the last rung it passed (0: the first); None: none")
    value: float | None = Field(description="its objective: the last value it reported")
    time: float | None = Field(description="how far it got, in the time metric")
    message: str | None
    created_at: float
    ended_at: float | None


class BestView(View):
    trial: int
    job_id: int | None
    value: float
    params: dict[str, Any]


class ExperimentView(View):
    id: int
    name: str
    team: str
    user: str
    status: ExperimentStatus
    reason: str | None
    message: str | None
    objective: Objective
    sampler: str
    stopping: str
    max_trials: int
    max_concurrent: int
    trials: dict[str, int] = Field(description="trials by state")
    best: BestView | None
    created_at: float
    ended_at: float | None


class ExperimentDetailView(ExperimentView):
    spec: dict[str, Any]
    trial_list: list[TrialView]


class TrialStandingView(View):
    """Where a trial stands in its experiment (``gpupool why`` of a trial's job): its
    state, and the verdict of each rung it was judged at."""

    experiment: str
    number: int
    state: TrialState
    rungs: list[str]
    message: str | None
