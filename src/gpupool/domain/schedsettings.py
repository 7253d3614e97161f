"""The scheduler's settings that a site owns, as data: the knobs an admin (or a tune) may
change while the server runs, each change a numbered version with who, when and why
(``services.schedsettings`` keeps them; ``gpupool scheduler config``, ``history``,
``rollback``; the admin page ``/scheduler``).

The knobs are fields of :class:`gpupool.domain.policy.Policy`, in its units: seconds, and
GPU-seconds of attained service for ``las_thresholds`` and ``placement_charge``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpupool.domain.policy import Policy
from gpupool.domain.units import format_duration

DAY = 86400.0
YEAR = 365 * DAY
KNOBS = (
    "las_thresholds",
    "min_runtime",
    "starvation_factor",
    "starvation_min_wait",
    "usage_half_life",
    "placement_charge",
    "packing",
    "order",
)
# what each knob does, in a line (the CLI's table, the admin page)
KNOB_HELP = {
    "las_thresholds": "attained service where a job drops to the next LAS level of its team",
    "min_runtime": "a job runs this long before LAS or priority may preempt it",
    "starvation_factor": "a job that waited this many times its service goes back to level one",
    "starvation_min_wait": "the least wait before that",
    "usage_half_life": "half-life of users' past usage (fair share inside a team)",
    "placement_charge": "usage a placement adds to its user for the rest of a cycle",
    "packing": "where a task goes: fgd (least fragmentation) or best-fit",
    "order": "inside a level: las (who came first) or gittins (most likely to end soon first)",
}
Source = Literal["admin", "rollback", "tune", "autotune", "watch"]

Seconds = Annotated[float, Field(ge=0.0, le=YEAR, allow_inf_nan=False)]
Thresholds = Annotated[list[float], Field(min_length=1, max_length=8)]
Reason = Annotated[
    str,
    Field(
        min_length=1,
        max_length=500,
        description="why (kept with the version, shown by history)",
    ),
]


def check_thresholds(values: list[float] | None) -> list[float] | None:
    """Increasing GPU-seconds, each more than 0 and finite (a ValueError says what to give)."""
    if values is None:
        return None
    if any(not (0.0 < v <= 1e9) for v in values):  # also refuses nan and inf
        raise ValueError("each threshold is GPU-seconds of attained service, more than 0")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError("thresholds go up: give them lowest first, each more than the last")
    return values


class SchedulerKnobs(BaseModel):
    """Every knob's value (a version's whole set)."""

    model_config = ConfigDict(extra="forbid")

    las_thresholds: Thresholds = Field(
        description="attained-service levels (GPU-seconds) where a job drops to the next LAS "
        "level inside its team: 1,800 = 0.5 GPU-hours"
    )
    min_runtime: Seconds = Field(
        description="seconds a job runs before LAS or priority may preempt it"
    )
    starvation_factor: float = Field(
        ge=0.0,
        le=1000.0,
        allow_inf_nan=False,
        description="a job that waited this many times its attained service goes back to the "
        "first level (0: never)",
    )
    starvation_min_wait: Seconds = Field(description="the least wait before that, in seconds")
    usage_half_life: float = Field(
        ge=60.0, le=YEAR, allow_inf_nan=False, description="half-life of users' past usage"
    )
    placement_charge: float = Field(
        ge=0.0,
        le=1e7,
        allow_inf_nan=False,
        description="GPU-seconds a placement adds to its user for the rest of a cycle",
    )
    packing: Literal["fgd", "best-fit"] = Field(description="where a task goes among its fits")
    # default: versions made before the knob existed
    order: Literal["las", "gittins"] = Field(
        "las", description="inside a level: las, or gittins (the Gittins index over service)"
    )

    _thresholds = field_validator("las_thresholds")(check_thresholds)

    @classmethod
    def of(cls, policy: Policy) -> SchedulerKnobs:
        return cls.model_validate({name: _plain(getattr(policy, name)) for name in KNOBS})

    def onto(self, policy: Policy) -> Policy:
        """``policy`` with these knobs (the rest as it is)."""
        values = self.model_dump()
        values["las_thresholds"] = tuple(values["las_thresholds"])
        return replace(policy, **values)

    def differ(self, other: SchedulerKnobs | None) -> list[str]:
        """The knobs whose value is not ``other``'s (all of them when there is none)."""
        if other is None:
            return list(KNOBS)
        return [name for name in KNOBS if getattr(self, name) != getattr(other, name)]


class KnobsChange(BaseModel):
    """What an admin changes: the knobs given take these values, the others keep theirs."""

    model_config = ConfigDict(extra="forbid")

    las_thresholds: Thresholds | None = None
    min_runtime: Seconds | None = None
    starvation_factor: float | None = Field(None, ge=0.0, le=1000.0, allow_inf_nan=False)
    starvation_min_wait: Seconds | None = None
    usage_half_life: float | None = Field(None, ge=60.0, le=YEAR, allow_inf_nan=False)
    placement_charge: float | None = Field(None, ge=0.0, le=1e7, allow_inf_nan=False)
    packing: Literal["fgd", "best-fit"] | None = None
    order: Literal["las", "gittins"] | None = None
    reason: Reason
    if_version: int | None = Field(
        None, ge=0, description="refuse (409) unless this is still the live version"
    )

    _thresholds = field_validator("las_thresholds")(check_thresholds)

    def given(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in KNOBS if getattr(self, n) is not None}


class Rollback(BaseModel):
    """Go back to an earlier version's knobs (0: the server environment's), as a new version."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=0, description="the version whose knobs to take again")
    reason: Reason
    if_version: int | None = Field(
        None, ge=0, description="refuse (409) unless this is still the live version"
    )


class SettingsVersionView(BaseModel):
    """One version: its knobs, what it changed from the one before, who, when, why, how."""

    version: int
    knobs: SchedulerKnobs
    changed: list[str]
    source: Source
    reason: str
    created_by: str | None
    created_at: float
    rollback_of: int | None = None
    prediction: dict[str, Any] | None = None


class SchedulerConfigView(BaseModel):
    """The live settings: their version (0: none was made; the environment's), every knob,
    and what the server's environment (``GPUPOOL_*``) gives, which ``rollback 0`` restores."""

    version: int
    knobs: SchedulerKnobs
    environment: SchedulerKnobs
    live: SettingsVersionView | None


def knob_text(name: str, value: Any) -> str:
    """A knob's value as people read it: 30m, 10h, 100h GPU; 10m; 4x; off; fgd."""
    if name == "las_thresholds":
        return ", ".join(format_duration(v) for v in value) + " GPU"
    if name == "placement_charge":
        return f"{format_duration(value)} GPU"
    if name == "starvation_factor":
        return "off" if value == 0 else f"{value:g}x"
    if name in ("packing", "order"):
        return str(value)
    return format_duration(value)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
