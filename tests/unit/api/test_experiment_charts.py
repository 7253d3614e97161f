"""An experiment's charts as the server draws them: the curves and the parallel coordinates."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.api.experiment_charts import (
    curve_chart,
    nice_ticks,
    parallel_chart,
    show_value,
)
from gpupool.domain.experiments import Objective, Parameter, TrialState, TrialView
from gpupool.services.experiments import CurvesView, TrialCurve

PARAMETERS = {
    "lr": Parameter(type="float", low=1e-4, high=1e-1, log=True),
    "layers": Parameter(type="int", low=1, high=9),
    "opt": Parameter(type="categorical", choices=["adam", "sgd", True]),
}
MINIMIZE = Objective(metric="error")


def trial(number: int, value: float | None, **params: Any) -> TrialView:
    point = {"lr": 1e-2, "layers": 5, "opt": "adam"} | params
    return TrialView(
        number=number,
        job_id=number,
        state=TrialState.COMPLETED if value is not None else TrialState.RUNNING,
        params=point,
        rung=None,
        value=value,
        time=None,
        message=None,
        created_at=0.0,
        ended_at=None,
    )


def ys(points: str) -> list[float]:
    return [float(pair.split(",")[1]) for pair in points.split()]


def test_each_parameter_and_the_objective_get_an_axis_in_order() -> None:
    chart = parallel_chart(PARAMETERS, MINIMIZE, [trial(1, 0.5), trial(2, 0.2)], best=2)

    assert [axis.name for axis in chart.axes] == ["lr", "layers", "opt", "error"]
    assert chart.axes[0].title == "float, log"
    assert [t.label for t in chart.axes[0].ticks] == ["0.001", "0.01"] or len(
        chart.axes[0].ticks
    ) >= 2
    assert [t.label for t in chart.axes[2].ticks] == ["adam", "sgd", "true"]
    assert chart.axes[3].title == "lower is better"
    xs = [axis.x for axis in chart.axes]
    assert xs == sorted(xs) and len(set(xs)) == 4


def test_values_land_on_their_axis_scale_log_linear_and_by_choice() -> None:
    low = parallel_chart(PARAMETERS, MINIMIZE, [trial(1, 1.0, lr=1e-4, layers=1, opt="adam")], None)
    high = parallel_chart(PARAMETERS, MINIMIZE, [trial(1, 1.0, lr=1e-1, layers=9, opt=True)], None)
    middle = parallel_chart(
        PARAMETERS, MINIMIZE, [trial(1, 1.0, lr=10**-2.5, layers=5, opt="sgd")], None
    )
    top, bottom = low.top, low.bottom

    assert ys(low.paths[0].points)[:3] == [bottom] * 3
    assert ys(high.paths[0].points)[:3] == [top] * 3
    assert ys(middle.paths[0].points)[:3] == [pytest.approx((top + bottom) / 2, abs=0.1)] * 3


def test_true_is_not_the_choice_1_and_1_is_the_choice_1_0() -> None:
    parameters = {"flag": Parameter(type="categorical", choices=[1.0, True])}
    chart = parallel_chart(
        parameters, MINIMIZE, [trial(1, 0.1, flag=1), trial(2, 0.2, flag=True)], None
    )
    first, second = (ys(path.points)[0] for path in chart.paths)
    assert (first, second) == (chart.bottom, chart.top)


def test_a_trial_without_an_objective_stops_at_the_last_parameter_and_is_dashed() -> None:
    chart = parallel_chart(PARAMETERS, MINIMIZE, [trial(1, 0.3), trial(2, None)], None)
    by_trial = {path.trial: path for path in chart.paths}

    assert len(by_trial[1].points.split()) == 4
    assert len(by_trial[2].points.split()) == 3
    assert by_trial[2].tone == "tone-none" and "no objective yet" in by_trial[2].title


def test_a_point_outside_the_declared_space_is_left_out_not_guessed() -> None:
    chart = parallel_chart(PARAMETERS, MINIMIZE, [trial(1, 0.3, opt="rmsprop")], None)
    assert chart.paths == []


def test_shades_rank_the_objective_its_way_and_the_best_is_drawn_last() -> None:
    trials = [trial(n, value) for n, value in enumerate([0.9, 0.1, 0.5, 0.7, 0.3], start=1)]

    minimized = parallel_chart(PARAMETERS, MINIMIZE, trials, best=2)
    maximized = parallel_chart(PARAMETERS, Objective(metric="acc", direction="maximize"), trials, 1)

    tones = {path.trial: path.tone for path in minimized.paths}
    assert tones == {2: "tone-0", 5: "tone-1", 3: "tone-2", 4: "tone-3", 1: "tone-4"}
    assert minimized.paths[-1].trial == 2 and minimized.paths[-1].best
    assert {path.trial: path.tone for path in maximized.paths}[1] == "tone-0"
    assert maximized.axes[-1].title == "higher is better"


def test_the_curves_draw_a_line_per_trial_with_points_the_best_on_top() -> None:
    found = CurvesView(
        experiment=1,
        metric="error",
        time_metric="step",
        trials=[
            TrialCurve(
                number=1,
                job_id=1,
                state=TrialState.COMPLETED,
                points=[(0, 1.0), (10, 0.2)],
                reported=2,
            ),
            TrialCurve(number=2, job_id=2, state=TrialState.RUNNING, points=[(0, 0.8)], reported=1),
            TrialCurve(number=3, job_id=None, state=TrialState.PENDING, points=[], reported=0),
        ],
    )

    chart = curve_chart(found, best=1)

    assert chart is not None
    assert [c.trial for c in chart.curves] == [2, 1]
    best = chart.curves[-1]
    assert best.best and best.end == (chart.plot[2], chart.plot[3])  # last x, lowest value
    assert "(the best)" in best.title
    assert (chart.x_title, chart.y_title) == ("step", "error")


def test_no_curves_before_any_trial_reported() -> None:
    empty = CurvesView(experiment=1, metric="error", time_metric="step", trials=[])
    assert curve_chart(empty, None) is None


@pytest.mark.parametrize(
    ("low", "high", "count", "expected"),
    [
        (0, 1, 4, [0, 0.25, 0.5, 0.75, 1]),
        (0, 1, 5, [0, 0.2, 0.4, 0.6, 0.8, 1]),
        (0.13, 1.44, 6, [0.25, 0.5, 0.75, 1, 1.25]),
        (3, 3, 5, [3]),
    ],
)
def test_ticks_are_round_values_inside_the_range(
    low: float, high: float, count: int, expected: list
) -> None:
    assert nice_ticks(low, high, count) == expected


def test_values_are_written_short() -> None:
    assert [show_value(v) for v in (0.000123456, 0.5, 3, True, "sgd", None)] == [
        "1.2e-04",
        "0.5",
        "3",
        "true",
        "sgd",
        "-",
    ]


def test_the_doubles_whole_range_is_drawn_without_overflowing() -> None:
    """Bounds, values and points as wide as a double goes (finite, so accepted) give a chart,
    never an error: a user's spec or a trial's report cannot break the page."""
    wide = {
        "w": Parameter(type="float", low=-1e308, high=1e308),
        "v": Parameter(type="float", low=1e-300, high=1e300, log=True),
    }
    trials = [trial(1, -1e308, w=1e308, v=1e-300), trial(2, 1e308, w=-1e308, v=1e300)]

    chart = parallel_chart(wide, MINIMIZE, trials, best=1)
    found = CurvesView(
        experiment=1,
        metric="error",
        time_metric="step",
        trials=[
            TrialCurve(
                number=1,
                job_id=1,
                state=TrialState.RUNNING,
                points=[(0, -1e308), (1e308, 1e308)],
                reported=2,
            )
        ],
    )
    curves = curve_chart(found, None)

    drawn = {path.trial: ys(path.points) for path in chart.paths}
    assert drawn[1] == [chart.top, chart.bottom, chart.bottom]
    assert drawn[2] == [chart.bottom, chart.top, chart.top]
    assert 2 <= len(chart.axes[1].ticks) <= 13
    assert curves is not None and "nan" not in curves.curves[0].points
