"""An experiment's two charts, drawn as inline SVG on the server (coordinates and labels; the
template escapes the text): each trial's objective over time, and the parallel coordinates
of its parameters against the objective.

Colours follow what a reader looks for: on the curves, each trial keeps one colour (its
number's, the swatch beside it in the trials table); on the parallel coordinates, a trial's
shade says how good its objective is among the others' (``tone-0``: the best fifth), so the
region of the space that works stands out. The best trial is drawn last, on top.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.domain.experiments import Objective, Parameter, TrialView
from gpupool.services.experiments import CurvesView

WIDTH = 720
CURVE_HEIGHT, CURVE_MARGINS = 280, (60, 16, 12, 36)  # left, right, top, bottom
PARALLEL_HEIGHT, PARALLEL_MARGINS = 320, (70, 70, 40, 16)
COLORS = 8  # line-0 .. line-7 of metrics.css, as on the job page's charts
TONES = 5  # tone-0 (the best fifth) .. tone-4
MAX_LABELS = 12  # of a categorical axis; with more choices, every k-th is named
LABEL_CHARS = 16


@dataclass(frozen=True)
class Tick:
    at: float  # pixels along the axis
    label: str


@dataclass(frozen=True)
class Curve:
    trial: int
    color: int
    points: str  # polyline points
    end: tuple[float, float]  # its last point, marked with a dot
    best: bool
    title: str


@dataclass(frozen=True)
class CurveChart:
    width: int
    height: int
    plot: tuple[float, float, float, float]  # left, top, right, bottom
    curves: list[Curve]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    x_title: str
    y_title: str


@dataclass(frozen=True)
class Axis:
    name: str
    title: str
    x: float
    ticks: list[Tick]  # at: the y of each tick


@dataclass(frozen=True)
class Path:
    trial: int
    points: str
    tone: str  # tone-0 .. tone-4, or tone-none (no objective yet)
    best: bool
    title: str


@dataclass(frozen=True)
class ParallelChart:
    width: int
    height: int
    top: float
    bottom: float
    axes: list[Axis]
    paths: list[Path]


def curve_chart(found: CurvesView, best: int | None) -> CurveChart | None:
    """One line per trial with points (None: no trial reported the objective yet)."""
    drawn = [trial for trial in found.trials if trial.points]
    if not drawn:
        return None
    left, right, top, bottom = _box(CURVE_HEIGHT, CURVE_MARGINS)
    xs = _span([x for trial in drawn for x, _ in trial.points])
    ys = _span([y for trial in drawn for _, y in trial.points])
    to_x = _scale(xs, left, right)
    to_y = _scale(ys, bottom, top)
    drawn.sort(key=lambda trial: trial.number == best)  # the best one on top
    curves = [_curve(trial.number, trial.points, to_x, to_y, best, found) for trial in drawn]
    return CurveChart(
        WIDTH,
        CURVE_HEIGHT,
        (left, top, right, bottom),
        curves,
        [Tick(to_x(v), _label(v)) for v in nice_ticks(*xs, 6)],
        [Tick(to_y(v), _label(v)) for v in nice_ticks(*ys, 6)],
        found.time_metric,
        found.metric,
    )


def parallel_chart(
    parameters: dict[str, Parameter],
    objective: Objective,
    trials: Sequence[TrialView],
    best: int | None,
) -> ParallelChart:
    """An axis per parameter (in the spec's order) and one for the objective; a path per
    trial through its values (stopping at the last parameter while it has no objective)."""
    left, right, top, bottom = _box(PARALLEL_HEIGHT, PARALLEL_MARGINS)
    scales = [_parameter_scale(p) for p in parameters.values()]
    scales.append(_objective_scale(objective, [t.value for t in trials if t.value is not None]))
    step = (right - left) / (len(scales) - 1)  # two axes at least: a parameter, the objective
    xs = [round(left + i * step, 1) for i in range(len(scales))]
    frame = _Frame([*parameters], scales, xs, top, bottom)
    axes = [
        Axis(name, scale.title, x, [Tick(frame.y(at), label) for at, label in scale.ticks])
        for name, scale, x in zip([*parameters, objective.metric], scales, frame.xs, strict=True)
    ]
    tones = _tones(objective, trials)
    ordered = sorted(trials, key=lambda t: t.number == best)  # the best one on top
    paths = [path for trial in ordered if (path := frame.path(trial, tones, best)) is not None]
    return ParallelChart(WIDTH, PARALLEL_HEIGHT, top, bottom, axes, paths)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values from ``low`` to ``high`` (steps of 1, 2, 2.5 or 5 times a
    power of ten)."""
    if high <= low:
        return [low]
    if not math.isfinite(high - low):  # the doubles' whole range: its ends
        return [low, high]
    rough = (high - low) / count
    power = 10 ** math.floor(math.log10(rough))
    step = next((m * power for m in (1, 2, 2.5, 5, 10) if m * power >= rough), rough)
    first = math.ceil(low / step - 1e-9)
    values = []
    for i in range(first, first + count * 3):
        value = round(i * step, 12)
        if value > high + step * 1e-9:
            break
        values.append(value)
    return values


# -- the curves ------------------------------------------------------------------------------


def _curve(
    number: int,
    points: Sequence[tuple[float, float]],
    to_x: Callable[[float], float],
    to_y: Callable[[float], float],
    best: int | None,
    found: CurvesView,
) -> Curve:
    coordinates = [(to_x(x), to_y(y)) for x, y in points]
    last_x, last_y = points[-1]
    title = f"trial {number}: {found.metric} {_label(last_y)} at {found.time_metric} "
    return Curve(
        trial=number,
        color=number % COLORS,
        points=" ".join(f"{x},{y}" for x, y in coordinates),
        end=coordinates[-1],
        best=number == best,
        title=title + _label(last_x) + (" (the best)" if number == best else ""),
    )


# -- the parallel coordinates -----------------------------------------------------------------


@dataclass(frozen=True)
class _AxisScale:
    """Where a value lies along an axis (0: the bottom, 1: the top; None: not on it)."""

    title: str
    place: Callable[[Any], float | None]
    ticks: list[tuple[float, str]]  # (place, label)


def _parameter_scale(parameter: Parameter) -> _AxisScale:
    if parameter.type == "categorical":
        return _categorical_scale(list(parameter.choices or []))
    assert parameter.low is not None and parameter.high is not None
    if parameter.log:
        return _log_scale(parameter.low, parameter.high, parameter.type)
    return _linear_scale(parameter.low, parameter.high, parameter.type)


def _objective_scale(objective: Objective, values: list[float]) -> _AxisScale:
    title = "lower is better" if objective.direction == "minimize" else "higher is better"
    if not values:
        return _AxisScale(title, lambda _value: None, [])
    return _linear_scale(min(values), max(values), "float", title)


def _linear_scale(low: float, high: float, kind: str, title: str = "") -> _AxisScale:
    def place(value: Any) -> float | None:
        number = _number(value)
        if number is None:
            return None
        return 0.5 if high == low else _clamp(fraction(number, low, high))

    values = nice_ticks(low, high, 5)
    ticks = [(p, _label(v)) for v in values if (p := place(v)) is not None]
    return _AxisScale(title or kind, place, ticks)


def _log_scale(low: float, high: float, kind: str) -> _AxisScale:
    span = math.log10(high) - math.log10(low)

    def place(value: Any) -> float | None:
        number = _number(value)
        if number is None or number <= 0:
            return None
        return 0.5 if span == 0 else _clamp((math.log10(number) - math.log10(low)) / span)

    decades = range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)
    every = math.ceil(len(decades) / MAX_LABELS)  # 1e-300 to 1e300: a label every 50 decades
    powers = [10.0**e for e in decades[::every]]
    values = powers if len(powers) >= 2 else [low, math.sqrt(low) * math.sqrt(high), high]
    ticks = [(p, _label(v)) for v in values if (p := place(v)) is not None]
    return _AxisScale(f"{kind}, log", place, ticks)


def _categorical_scale(choices: list[Any]) -> _AxisScale:
    index: dict[tuple[str, Any], int] = {}
    for i, choice in enumerate(choices):
        index.setdefault(_key(choice), i)
    last = max(1, len(choices) - 1)

    def place(value: Any) -> float | None:
        at = index.get(_key(value))
        if at is None:
            return None
        return 0.5 if len(choices) == 1 else at / last

    every = math.ceil(len(choices) / MAX_LABELS)
    ticks = [
        (0.5 if len(choices) == 1 else i / last, _short(show_value(choice)))
        for i, choice in enumerate(choices)
        if i % every == 0 or i == len(choices) - 1
    ]
    return _AxisScale("categorical", place, ticks)


@dataclass(frozen=True)
class _Frame:
    """The axes' names (the objective's last), scales and places across the chart."""

    names: list[str]  # the parameters'
    scales: list[_AxisScale]
    xs: list[float]
    top: float
    bottom: float

    def y(self, place: float) -> float:
        return round(self.bottom - place * (self.bottom - self.top), 1)

    def path(self, trial: TrialView, tones: dict[int, int], best: int | None) -> Path | None:
        values = [trial.params.get(name) for name in self.names] + [trial.value]
        places = [scale.place(value) for scale, value in zip(self.scales, values, strict=True)]
        if any(place is None for place in places[:-1]):
            return None  # a point outside the space as it is declared now: not drawn
        points = " ".join(
            f"{round(x, 1)},{self.y(p)}"
            for x, p in zip(self.xs, places, strict=True)
            if p is not None
        )
        tone = f"tone-{tones[trial.number]}" if trial.number in tones else "tone-none"
        return Path(trial.number, points, tone, trial.number == best, self._title(trial, best))

    def _title(self, trial: TrialView, best: int | None) -> str:
        shown = " · ".join(f"{name}={show_value(trial.params.get(name))}" for name in self.names)
        value = "no objective yet" if trial.value is None else _label(trial.value)
        return f"trial {trial.number}: {shown} → {value}" + (
            " (the best)" if trial.number == best else ""
        )


def _tones(objective: Objective, trials: Sequence[TrialView]) -> dict[int, int]:
    """trial number -> its fifth among the trials with an objective (0: the best)."""
    valued = [t for t in trials if t.value is not None]
    highest_first = objective.direction == "maximize"
    ranked = sorted(valued, key=lambda t: t.value or 0.0, reverse=highest_first)
    return {t.number: i * TONES // len(ranked) for i, t in enumerate(ranked)}


# -- helpers ---------------------------------------------------------------------------------


def _box(height: int, margins: tuple[int, int, int, int]) -> tuple[float, float, float, float]:
    left, right, top, bottom = margins
    return float(left), float(WIDTH - right), float(top), float(height - bottom)


def _span(values: list[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    return (low - 1, high + 1) if high == low else (low, high)


def _scale(span: tuple[float, float], start: float, end: float) -> Callable[[float], float]:
    low, high = span

    def to(value: float) -> float:
        return round(start + fraction(value, low, high) * (end - start), 1)

    return to


def fraction(value: float, low: float, high: float) -> float:
    """How far ``value`` lies from ``low`` to ``high`` (0 to 1 inside), in halves so that a
    span as wide as the doubles' (-1e308 to 1e308) does not overflow to infinity."""
    return (value / 2 - low / 2) / (high / 2 - low / 2)


def _clamp(share: float) -> float:
    return min(1.0, max(0.0, share))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _key(value: Any) -> tuple[str, Any]:
    """A choice as compared: True is not 1, and 1 is 1.0 (JSON keeps no int/float)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    return ("text", str(value))


def _label(value: float) -> str:
    """4 significant digits; an exponent for the very large and the very small."""
    size = abs(value)
    if size and (size >= 1e6 or size < 1e-3):
        return f"{value:.1e}"
    return f"{value:.4g}"


def show_value(value: Any) -> str:
    """A parameter's value as the page writes it: 4 significant digits, true or false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _label(value)
    return "-" if value is None else str(value)


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
