"""The teams page's chart geometry: lines inside the plot, axes with readable ticks."""

from __future__ import annotations

from gpupool.api.charts import HEIGHT, WIDTH, team_chart

HOUR = 3600.0
TIMES = [i * HOUR for i in range(6)]


def chart(held, fair=None, demand=None, guarantee=0.0, limit=None):  # noqa: ANN001, ANN201
    guarantees = guarantee if isinstance(guarantee, list) else [guarantee] * len(held)
    series = {"held": held, "fair": fair or held, "demand": demand or held, "guarantee": guarantees}
    now = {name: values[-1] for name, values in series.items()}
    return team_chart(TIMES, HOUR, series, now, limit)


def points(text: str) -> list[tuple[float, float]]:
    return [tuple(float(v) for v in pair.split(",")) for pair in text.split()]


def test_every_line_has_a_point_per_bucket_and_one_for_now_inside_the_plot() -> None:
    drawn = chart([0, 1, 2, 3, 2, 1], demand=[1, 2, 3, 4, 3, 2], guarantee=2, limit=4)
    left, top, right, bottom = drawn.plot
    for line in (drawn.held_line, drawn.fair_line, drawn.demand_line):
        found = points(line)
        assert len(found) == 7
        assert all(left <= x <= right and top <= y <= bottom for x, y in found)
        assert [x for x, _ in found] == sorted(x for x, _ in found)
    assert points(drawn.held_line)[0][1] == bottom, "0 GPUs sits on the axis"
    assert drawn.held_area.startswith("M ") and drawn.held_area.endswith(" Z")
    assert all(top <= y <= bottom for _, y in points(drawn.guarantee_line))
    assert drawn.limit_y == top, "the limit tops the axis"
    assert [tick.label for tick in drawn.y_ticks] == ["0", "1", "2", "3", "4"]
    assert [tick.label for tick in drawn.x_ticks][:2] == ["00:00", "01:00"]
    assert not drawn.empty and (drawn.width, drawn.height) == (WIDTH, HEIGHT)


def test_an_idle_team_gets_an_empty_chart_with_a_unit_axis() -> None:
    drawn = chart([0.0] * 6)
    assert drawn.empty and drawn.guarantee_line == "" and drawn.limit_y is None
    assert drawn.y_ticks[-1].label == "1"


def test_the_axis_top_is_a_round_number_above_the_largest_value() -> None:
    assert chart([0, 0, 0, 0, 0, 6]).y_ticks[-1].label == "8"
    assert chart([0, 0, 0, 0, 0, 33]).y_ticks[-1].label == "40"


def test_the_guarantee_is_a_step_line_held_across_each_bucket() -> None:
    drawn = chart([0, 1, 2, 3, 2, 1], guarantee=[2, 2, 2, 1, 1, 1])
    found = points(drawn.guarantee_line)
    left, top, right, bottom = drawn.plot
    assert len(found) == 2 * 6 + 1, "two corners a bucket, then now"
    assert found[0][0] == left and found[-1][0] == right
    xs = [x for x, _ in found]
    assert xs == sorted(xs)
    heights = sorted({y for _, y in found})
    assert len(heights) == 2, "one height before the change, one after"
    high, low = heights  # a smaller guarantee sits lower: a larger y
    assert [y for _, y in found[:6]] == [high] * 6 and [y for _, y in found[6:]] == [low] * 7
    assert found[5][0] == found[6][0], "the step is vertical, at the bucket's edge"
