"""Successive halving decided in trial order: the verdicts depend on the values only, never
on the order in which trials reported (a preempted trial, a slow node, a restart)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.experiments import Objective
from gpupool.services.experiments._rungs import Curve, Verdict, judge, value_at

RUNGS = [1.0, 3.0, 9.0]
MINIMIZE = Objective(metric="loss")


def curves_of(values: dict[int, list[float]], reported: dict[int, int]) -> list[Curve]:
    """Each trial's first ``reported`` points (epoch 1, 2, ...); a trial that reported all
    of its points has ended."""
    return [
        Curve(
            number,
            [(float(epoch), v) for epoch, v in enumerate(points[: reported[number]], start=1)],
            ended=reported[number] == len(points),
        )
        for number, points in values.items()
    ]


def replay(values: dict[int, list[float]], order: list[int]) -> dict[tuple[int, int], Verdict]:
    """Reveal one point at a time in ``order`` (trial numbers), judging after each, as the
    pipeline does pass after pass; a stopped trial reports nothing more."""
    decided: dict[tuple[int, int], Verdict] = {}
    reported = dict.fromkeys(values, 0)
    stopped: set[int] = set()
    for number in order:
        if number in stopped or reported[number] == len(values[number]):
            continue
        reported[number] += 1
        for verdict in judge(curves_of(values, reported), RUNGS, 3, MINIMIZE, decided):
            decided[(verdict.number, verdict.rung)] = verdict
            if not verdict.goes_on:
                stopped.add(verdict.number)
                reported[verdict.number] = len(values[verdict.number])  # it ends there
    return decided


curves = st.dictionaries(
    st.integers(1, 12),
    st.lists(st.floats(0, 10, allow_nan=False), min_size=9, max_size=9),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(curves, st.randoms(use_true_random=False))
def test_any_order_of_reports_gives_the_same_verdicts(values, rng: random.Random) -> None:
    in_order = [n for n in sorted(values) for _ in range(9)]
    shuffled = in_order[:]
    rng.shuffle(shuffled)
    shuffled += in_order  # whatever was left
    assert replay(values, shuffled) == replay(values, in_order)


def test_a_verdict_ranks_the_trials_numbered_up_to_it() -> None:
    values = {n: [float(n)] * 9 for n in range(1, 7)}  # a lower number is better
    values[6] = [0.5] * 9  # the last is best of all
    decided = replay(values, [n for n in sorted(values) for _ in range(9)])
    first = {n: decided[(n, 0)] for n in values}
    assert (first[1].rank, first[1].of, first[1].keep) == (1, 1, 1)
    assert (first[3].rank, first[3].of, first[3].keep) == (3, 3, 1)
    assert not first[3].goes_on and first[6].goes_on and first[6].rank == 1
    assert first[3].message("epoch") == (
        "rung 0 (epoch 1): rank 3 of 3, the top 1 continue; stopped"
    )


def test_a_verdict_waits_for_earlier_trials_still_below_the_rung() -> None:
    values = {1: [5.0] * 9, 2: [1.0] * 9}
    trial_2_first = curves_of(values, {1: 0, 2: 9})
    assert [v.number for v in judge(trial_2_first, RUNGS, 3, MINIMIZE, {})] == []
    trial_1_ended = [Curve(1, [], ended=True), trial_2_first[1]]
    assert {v.number for v in judge(trial_1_ended, RUNGS, 3, MINIMIZE, {})} == {2}


def test_the_value_at_a_rung_is_the_first_reported_at_or_past_it() -> None:
    points = [(1.0, 3.0), (2.5, 2.0), (3.5, 1.0), (3.0, 9.0)]  # a resumed trial repeats
    assert value_at(points, 3.0) == 1.0
    assert value_at(points, 9.0) is None
