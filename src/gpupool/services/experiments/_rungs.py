"""Asynchronous successive halving, decided in trial order (pure: no database, no clock).

Rungs lie at ``grace * reduction_factor**k`` of the time metric, below ``max_time``. A
trial's value at a rung is the objective it reported at the first point at or past the
rung. At each rung a trial goes on only if it ranks in the best ``max(1, n //
reduction_factor)`` of the ``n`` trials numbered up to it that reached the rung (ties go
to the lower number) -- the promotion rule of ASHA (Li et al., 2020) and of Optuna's
``SuccessiveHalvingPruner``, with one difference: the trials compared with trial ``i`` are
those numbered before it, not those that happened to report first. So a verdict waits until
every earlier trial has reached the rung or ended below it, and then depends on nothing but
the values: a trial that was preempted, or a server that restarted, changes no verdict.
While a verdict waits, the trial goes on running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.experiments import Objective, verdict_text

Point = tuple[float, float]  # (time, objective value), in the order reported


@dataclass(frozen=True)
class Curve:
    """What one trial reported (``points``), and whether it can report more (``ended``:
    its job ended)."""

    number: int
    points: Sequence[Point]
    ended: bool = False


@dataclass(frozen=True)
class Verdict:
    """A trial's fate at one rung: its rank among the ``of`` trials compared, the ``keep``
    best of which go on."""

    number: int
    rung: int
    at: float
    value: float
    rank: int
    of: int
    keep: int

    @property
    def goes_on(self) -> bool:
        return self.rank <= self.keep

    @property
    def standing(self) -> float:
        """1 for the first of the trials compared, towards 0 for the last."""
        return 1.0 - (self.rank - 1) / self.of

    def message(self, time_metric: str) -> str:
        return verdict_text(self.rung, self.at, time_metric, self.rank, self.of, self.keep)

    def as_json(self) -> list[float | int]:
        return [self.value, self.rank, self.of, self.keep]


def value_at(points: Sequence[Point], at: float) -> float | None:
    """The value reported at the first point at or past ``at``; None before it is reached."""
    for time, value in points:
        if time >= at:
            return value
    return None


def judge(
    curves: Sequence[Curve],
    rungs: Sequence[float],
    reduction_factor: float,
    objective: Objective,
    decided: Mapping[tuple[int, int], Verdict],
) -> list[Verdict]:
    """The verdicts that can be given now and were not given before (``decided``: by
    (trial number, rung)), in trial order; a trial stopped at a rung is judged no further."""
    ordered = sorted(curves, key=lambda c: c.number)
    values = [[value_at(c.points, at) for at in rungs] for c in ordered]
    known = dict(decided)
    verdicts: list[Verdict] = []
    for index, curve in enumerate(ordered):
        for rung, at in enumerate(rungs):
            earlier = known.get((curve.number, rung))
            if earlier is not None:
                if not earlier.goes_on:
                    break
                continue
            mine = values[index][rung]
            if mine is None or not all(
                _settled(ordered, values, known, j, rung) for j in range(index)
            ):
                break
            verdict = _rank(ordered, values, known, index, rung, at, reduction_factor, objective)
            known[(curve.number, rung)] = verdict
            verdicts.append(verdict)
            if not verdict.goes_on:
                break
    return verdicts


def _competes(
    ordered: Sequence[Curve],
    values: Sequence[Sequence[float | None]],
    known: Mapping[tuple[int, int], Verdict],
    index: int,
    rung: int,
) -> bool | None:
    """Whether the trial at ``index`` is among those compared at ``rung``: True (it reached
    the rung, going on from every rung below), False (it never will: stopped below, or
    ended before it), None (not known yet)."""
    number = ordered[index].number
    for below in range(rung):
        verdict = known.get((number, below))
        if verdict is not None and not verdict.goes_on:
            return False
        if verdict is None:
            return False if ordered[index].ended and values[index][below] is None else None
    if values[index][rung] is not None:
        return True
    return False if ordered[index].ended else None


def _settled(
    ordered: Sequence[Curve],
    values: Sequence[Sequence[float | None]],
    known: Mapping[tuple[int, int], Verdict],
    index: int,
    rung: int,
) -> bool:
    return _competes(ordered, values, known, index, rung) is not None


def _rank(
    ordered: Sequence[Curve],
    values: Sequence[Sequence[float | None]],
    known: Mapping[tuple[int, int], Verdict],
    index: int,
    rung: int,
    at: float,
    reduction_factor: float,
    objective: Objective,
) -> Verdict:
    mine = values[index][rung]
    assert mine is not None
    ahead, of = 0, 1
    for earlier in range(index):
        if not _competes(ordered, values, known, earlier, rung):
            continue
        value = values[earlier][rung]
        assert value is not None
        of += 1
        if not objective.better(mine, value):
            ahead += 1  # better, or equal and numbered before it
    keep = max(1, int(of // reduction_factor))
    return Verdict(ordered[index].number, rung, at, mine, ahead + 1, of, keep)
