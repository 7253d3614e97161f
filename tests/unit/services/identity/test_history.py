"""Team history from intervals: when jobs waited, average GPUs per bucket, values now."""

from __future__ import annotations

import math

import pytest

from gpupool.services.identity._history import Window, _at, _spread, _waits

HOUR = 3600.0
WINDOW = Window(end=10 * HOUR, hours=4, buckets=4)  # buckets start at 6, 7, 8 and 9 h


def test_a_job_waits_before_each_attempt_and_after_the_last_until_it_ends() -> None:
    attempts = [(2 * HOUR, 3 * HOUR), (4 * HOUR, 5 * HOUR)]
    waits = list(_waits("ml", 2.0, HOUR, 6 * HOUR, attempts))
    assert waits == [
        ("ml", HOUR, 2 * HOUR, 2.0),
        ("ml", 3 * HOUR, 4 * HOUR, 2.0),
        ("ml", 5 * HOUR, 6 * HOUR, 2.0),
    ]


def test_a_running_job_stops_waiting_and_a_pending_one_waits_on() -> None:
    assert list(_waits("ml", 1.0, HOUR, None, [(2 * HOUR, None)])) == [("ml", HOUR, 2 * HOUR, 1.0)]
    assert list(_waits("ml", 1.0, HOUR, None, [])) == [("ml", HOUR, math.inf, 1.0)]


def test_buckets_hold_the_average_over_their_span() -> None:
    spans = [
        ("ml", 6.5 * HOUR, 7.5 * HOUR, 2.0),  # half of bucket 0 and half of bucket 1
        ("ml", 9 * HOUR, math.inf, 1.0),  # all of the last bucket, still going
        ("cv", 0.0, 5 * HOUR, 4.0),  # before the window: not counted
        ("other", 6 * HOUR, 7 * HOUR, 8.0),  # a team not asked for
    ]
    values = _spread(spans, WINDOW, ["ml", "cv"])
    assert values["ml"] == pytest.approx([1.0, 1.0, 0.0, 1.0])
    assert values["cv"] == [0.0] * 4
    assert WINDOW.starts() == [6 * HOUR, 7 * HOUR, 8 * HOUR, 9 * HOUR]


def test_now_counts_what_has_not_ended() -> None:
    spans = [("ml", 9 * HOUR, math.inf, 1.0), ("ml", 6 * HOUR, 9.5 * HOUR, 2.0)]
    assert _at(spans, WINDOW.end, ["ml", "cv"]) == {"ml": 1.0, "cv": 0.0}
