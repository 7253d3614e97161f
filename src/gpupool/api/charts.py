"""Line charts drawn as inline SVG on the server: coordinates and labels, no chart library.

``team_chart`` turns one team's series (GPUs per time bucket) into what the template draws:
an area for the GPUs held, lines for the fair share and the demand, a step line for the
guarantee (it holds from one change to the next), a flat line for today's limit, and the ticks
of both axes. Values only: the template escapes text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28  # room for the axis labels
X_TICKS = 6


@dataclass(frozen=True)
class Tick:
    at: float  # pixel position along the axis
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot: tuple[float, float, float, float]  # left, top, right, bottom
    held_area: str  # SVG path
    held_line: str  # polyline points
    fair_line: str
    demand_line: str
    guarantee_line: str  # polyline points, empty when the team was never guaranteed any GPU
    limit_y: float | None
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    empty: bool


def team_chart(
    times: Sequence[float],
    bucket: float,
    series: Mapping[str, Sequence[float]],
    now: Mapping[str, float],
    limit: float | None,
) -> Chart:
    """The chart of one team. ``times``: the buckets' starts (epoch seconds); ``series``:
    ``held``, ``fair`` and ``demand`` per bucket, drawn at each bucket's middle, and
    ``guarantee`` per bucket, drawn across the bucket; ``now``: the same four at the end of
    the last bucket, where each line ends. ``limit``: today's."""
    lines = {name: [*series[name], now[name]] for name in ("held", "fair", "demand", "guarantee")}
    everything = [value for values in lines.values() for value in values]
    top_value = _nice_top(max([*everything, limit or 0.0, 1.0]))
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    start, end = (times[0], times[-1] + bucket) if times else (0.0, 1.0)

    def x(at: float) -> float:
        return round(left + (at - start) / (end - start) * (right - left), 1)

    def y(value: float) -> float:
        return round(bottom - min(value, top_value) / top_value * (bottom - top), 1)

    middles = [at + bucket / 2 for at in times] + [end]
    return Chart(
        WIDTH,
        HEIGHT,
        (left, top, right, bottom),
        _area(middles, lines["held"], x, y, bottom),
        _points(middles, lines["held"], x, y),
        _points(middles, lines["fair"], x, y),
        _points(middles, lines["demand"], x, y),
        _steps([*times, end], lines["guarantee"], x, y) if any(lines["guarantee"]) else "",
        y(limit) if limit is not None and limit <= top_value else None,
        [Tick(x(at), _clock(at, end - start)) for at in _time_ticks(start, end)],
        [Tick(y(value), f"{value:g}") for value in _value_ticks(top_value)],
        not any(lines["held"]) and not any(lines["demand"]),
    )


def _points(middles: Sequence[float], values: Sequence[float], x, y) -> str:  # noqa: ANN001
    return " ".join(f"{x(at)},{y(v)}" for at, v in zip(middles, values, strict=True))


def _steps(edges: Sequence[float], values: Sequence[float], x, y) -> str:  # noqa: ANN001
    """Each bucket's value held from its start to its end; the last value (now) at the end."""
    corners = [(at, v) for i, v in enumerate(values[:-1]) for at in (edges[i], edges[i + 1])]
    corners.append((edges[-1], values[-1]))
    return " ".join(f"{x(at)},{y(v)}" for at, v in corners)


def _area(middles: Sequence[float], values: Sequence[float], x, y, base: float) -> str:  # noqa: ANN001
    if not middles:
        return ""
    line = " L ".join(f"{x(at)} {y(v)}" for at, v in zip(middles, values, strict=True))
    return f"M {x(middles[0])} {base} L {line} L {x(middles[-1])} {base} Z"


def _nice_top(value: float) -> float:
    """The axis' top: 1, 2, 4, 5, 8 or 10 times a power of ten, at least ``value``."""
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 4, 5, 8, 10):
        if step * power >= value - 1e-9:
            return step * power
    return 10 * power


def _value_ticks(top: float) -> list[float]:
    step = top / 4
    return [round(step * i, 6) for i in range(5)]


def _time_ticks(start: float, end: float) -> list[float]:
    span = end - start
    steps = (900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
    step = next(
        (s for s in steps if span / s <= X_TICKS), 86400 * math.ceil(span / 86400 / X_TICKS)
    )
    return _range(math.ceil(start / step) * step, end, step)


def _range(first: float, end: float, step: float) -> list[float]:
    found, at = [], first
    while at <= end + 1e-6:
        found.append(at)
        at += step
    return found


def _clock(at: float, span: float) -> str:
    """'14:00' for spans within two days, else '30 Nov 12:00' (UTC)."""
    return time.strftime("%H:%M" if span <= 2 * 86400 else "%d %b %H:%M", time.gmtime(at))
