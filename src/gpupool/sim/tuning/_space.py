"""The knobs the tuner searches, their ranges, and how a point of the space becomes a Policy.

Searched (``gpupool.domain.policy.Policy``): the least-attained-service levels
(``las_thresholds``: a first threshold, a growth factor from one to the next and how many),
``min_runtime``, ``starvation_factor`` and ``starvation_min_wait``, ``packing`` and the
``order`` ("las", or "gittins": the levels ordered inside by the Gittins index over the
service seen). Where some team has more than one user, also ``placement_charge`` and
``usage_half_life``: both only order one user's jobs against another's of the same team
(the replay keeps each user's decayed usage exactly, ``engine.DecayedUsage``), so with one
user per team, as in the Philly trace, they cannot change a decision and are left out.

A point is a dict of knob -> value (JSON-able): the report shows it, ``apply_knobs`` makes
the Policy. Thresholds are rounded to whole minutes, so nearby TPE suggestions become the
same point, which the search replays once.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from gpupool.domain.policy import Policy
from gpupool.sim.tuning._report import Knobs, Space

if TYPE_CHECKING:
    import optuna

    from gpupool.sim.traces import TraceJob

HOUR = 3600.0
DAY = 86400.0
# TPE's ranges
LAS_FIRST = (600.0, 8 * HOUR)  # the first threshold, GPU-seconds (log scale)
LAS_GROWTH = (2.0, 30.0)  # each threshold over the one before (log scale)
LAS_LEVELS = (1, 4)  # thresholds
MIN_RUNTIMES = (0.0, 300.0, 900.0, 1800.0, 3600.0)
STARVATION_FACTORS = (0.0, 2.0, 5.0, 10.0, 20.0)
STARVATION_MIN_WAITS = (1800.0, 3600.0, 7200.0, 4 * HOUR)
PACKINGS = ("fgd", "best-fit")
ORDERS = ("las", "gittins")
PLACEMENT_CHARGES = (0.0, 600.0, 3600.0)
HALF_LIVES = (DAY, 7 * DAY, 30 * DAY)
# the grid: each list's values, every combination
GRID_THRESHOLDS = (
    (1800.0, 36000.0, 360000.0),
    (3600.0, 36000.0, 360000.0),
    (7200.0, 72000.0, 720000.0),
    (3600.0, 14400.0),
    (3250.0, 7200.0),
    (900.0, 7200.0, 72000.0),
)
GRID_MIN_RUNTIMES = (0.0, 900.0)
GRID_STARVATION = ((0.0, 3600.0), (5.0, 3600.0), (20.0, 3600.0))
GRID_PLACEMENT_CHARGES = (0.0, 600.0)
GRID_HALF_LIVES = (DAY, 7 * DAY)

SEARCHED = (
    "las_thresholds",
    "min_runtime",
    "starvation_factor",
    "starvation_min_wait",
    "packing",
    "order",
)
PER_USER = ("placement_charge", "usage_half_life")
ONE_USER = "every team has one user: it orders one user's jobs against another's of a team"


def knobs_of(policy: Policy, multi_user: bool) -> Knobs:
    """The searched knobs' values in ``policy``."""
    names = SEARCHED + (PER_USER if multi_user else ())
    knobs: Knobs = {name: getattr(policy, name) for name in names}
    knobs["las_thresholds"] = list(policy.las_thresholds)
    return knobs


def apply_knobs(base: Policy, knobs: Knobs) -> Policy:
    """``base`` with the knobs' values (what the tuner chose becomes a Policy so)."""
    values = dict(knobs)
    if "las_thresholds" in values:
        values["las_thresholds"] = tuple(float(value) for value in values["las_thresholds"])
    return replace(base, **values)


def has_many_users(jobs: Sequence[TraceJob]) -> bool:
    """Whether some team has more than one user (``PER_USER`` knobs can matter)."""
    users: dict[str, str] = {}
    return any(users.setdefault(job.team, job.user) != job.user for job in jobs)


def describe(sampler: str, multi_user: bool) -> Space:
    """What the search covers, as the report shows it."""
    left_out = {"usage_half_life": ONE_USER, "placement_charge": ONE_USER}
    if multi_user:
        left_out = {}
    left_out["max_starts, max_tries, explain, locality"] = "change speed, not decisions"
    if sampler == "grid":
        knobs = {
            "las_thresholds": ", ".join(str(list(values)) for values in GRID_THRESHOLDS),
            "min_runtime": _listed(GRID_MIN_RUNTIMES),
            "starvation_factor, starvation_min_wait": ", ".join(map(str, GRID_STARVATION)),
            "order": _listed(ORDERS),
        }
        if multi_user:
            knobs["placement_charge"] = _listed(GRID_PLACEMENT_CHARGES)
            knobs["usage_half_life"] = _listed(GRID_HALF_LIVES)
        left_out["packing"] = "the base's (grid kept small)"
        return Space(sampler, knobs, left_out, len(grid(multi_user)))
    knobs = {
        "las_thresholds": (
            f"first {LAS_FIRST[0]:g}-{LAS_FIRST[1]:g} s (log), each next x{LAS_GROWTH[0]:g}-"
            f"{LAS_GROWTH[1]:g} (log), {LAS_LEVELS[0]}-{LAS_LEVELS[1]} thresholds"
        ),
        "min_runtime": _listed(MIN_RUNTIMES),
        "starvation_factor": _listed(STARVATION_FACTORS),
        "starvation_min_wait": _listed(STARVATION_MIN_WAITS) + " (with a factor)",
        "packing": _listed(PACKINGS),
        "order": _listed(ORDERS),
    }
    if multi_user:
        knobs["placement_charge"] = _listed(PLACEMENT_CHARGES)
        knobs["usage_half_life"] = _listed(HALF_LIVES)
    return Space(sampler, knobs, left_out)


def _listed(values: Sequence[object]) -> str:
    return ", ".join(f"{value:g}" if isinstance(value, float) else str(value) for value in values)


def suggest(trial: optuna.Trial, base: Policy, multi_user: bool) -> Knobs:
    """A point of the space from TPE (``trial``), the knobs it does not search the base's."""
    first = trial.suggest_float("las_first", *LAS_FIRST, log=True)
    growth = trial.suggest_float("las_growth", *LAS_GROWTH, log=True)
    levels = trial.suggest_int("las_levels", *LAS_LEVELS)
    factor = trial.suggest_categorical("starvation_factor", STARVATION_FACTORS)
    knobs: Knobs = {
        "las_thresholds": thresholds(first, growth, levels),
        "min_runtime": trial.suggest_categorical("min_runtime", MIN_RUNTIMES),
        "starvation_factor": factor,
        "starvation_min_wait": base.starvation_min_wait,
        "packing": trial.suggest_categorical("packing", PACKINGS),
        "order": trial.suggest_categorical("order", ORDERS),
    }
    if factor > 0:  # the least wait only counts with a factor
        knobs["starvation_min_wait"] = trial.suggest_categorical(
            "starvation_min_wait", STARVATION_MIN_WAITS
        )
    if multi_user:
        knobs["placement_charge"] = trial.suggest_categorical("placement_charge", PLACEMENT_CHARGES)
        knobs["usage_half_life"] = trial.suggest_categorical("usage_half_life", HALF_LIVES)
    return knobs


def thresholds(first: float, growth: float, levels: int) -> list[float]:
    """``levels`` thresholds from ``first``, each ``growth`` times the last, whole minutes."""
    return [60.0 * max(1, round(first * growth**level / 60.0)) for level in range(levels)]


def grid(multi_user: bool) -> list[Knobs]:
    """Every point of the grid, in a fixed order."""
    per_user: Sequence[tuple[float, float]] = [(math.nan, math.nan)]
    if multi_user:
        per_user = list(itertools.product(GRID_PLACEMENT_CHARGES, GRID_HALF_LIVES))
    points = []
    for las, runtime, (factor, wait), order, (charge, half_life) in itertools.product(
        GRID_THRESHOLDS, GRID_MIN_RUNTIMES, GRID_STARVATION, ORDERS, per_user
    ):
        knobs: Knobs = {
            "las_thresholds": list(las),
            "min_runtime": runtime,
            "starvation_factor": factor,
            "starvation_min_wait": wait,
            "order": order,
        }
        if multi_user:
            knobs["placement_charge"] = charge
            knobs["usage_half_life"] = half_life
        points.append(knobs)
    return points


def grid_sample(points: list[Knobs], trials: int, seed: int) -> list[Knobs]:
    """The grid whole when it has no more than ``trials`` points, else ``trials`` of them
    drawn with ``seed``, in grid order."""
    if len(points) <= trials:
        return points
    picked = sorted(random.Random(seed).sample(range(len(points)), trials))
    return [points[index] for index in picked]


def point_key(knobs: Knobs) -> str:
    """One text per point (equal points, equal texts): replays are shared by it."""
    return repr(sorted((name, _plain(value)) for name, value in knobs.items()))


def _plain(value: object) -> object:
    if isinstance(value, list | tuple):
        return tuple(float(item) for item in value)
    return float(value) if isinstance(value, int | float) else value
