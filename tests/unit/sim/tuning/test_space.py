"""The knobs searched, their grid, and a point of the space as a Policy."""

from __future__ import annotations

import optuna
import pytest

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.sim.tuning import apply_knobs, knobs_of
from gpupool.sim.tuning._space import (
    describe,
    grid,
    grid_sample,
    has_many_users,
    point_key,
    suggest,
    thresholds,
)
from tests.support.traces import job


def test_thresholds_grow_from_the_first_in_whole_minutes():
    assert thresholds(1000.0, 10.0, 3) == [1020.0, 10020.0, 100020.0]
    assert thresholds(600.0, 2.0, 2) == [600.0, 1200.0]


def test_a_policys_knobs_make_the_policy_again():
    knobs = knobs_of(DEFAULT_POLICY, multi_user=True)
    assert set(knobs) == {
        "las_thresholds",
        "min_runtime",
        "starvation_factor",
        "starvation_min_wait",
        "packing",
        "order",
        "placement_charge",
        "usage_half_life",
    }
    assert apply_knobs(DEFAULT_POLICY, knobs) == DEFAULT_POLICY
    changed = apply_knobs(DEFAULT_POLICY, {"las_thresholds": [60, 120], "order": "gittins"})
    assert changed.las_thresholds == (60.0, 120.0) and changed.order == "gittins"


def test_the_per_user_knobs_are_searched_only_where_a_team_has_two_users():
    one = (job(1, 0, 1, 1, "a"), job(2, 0, 1, 1, "b"))
    assert not has_many_users(one)
    assert has_many_users((*one, job(3, 0, 1, 1, "a", user="ann")))
    space = describe("tpe", multi_user=False)
    assert "usage_half_life" not in space.knobs and "one user" in space.left_out["usage_half_life"]
    assert "usage_half_life" in describe("tpe", multi_user=True).knobs


def test_tpe_suggests_points_within_the_space():
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3))
    for _ in range(20):
        knobs = suggest(study.ask(), DEFAULT_POLICY, multi_user=False)
        levels = knobs["las_thresholds"]
        assert 1 <= len(levels) <= 4 and levels == sorted(levels)
        assert knobs["order"] in ("las", "gittins") and knobs["packing"] in ("fgd", "best-fit")
        if knobs["starvation_factor"] == 0:
            assert knobs["starvation_min_wait"] == DEFAULT_POLICY.starvation_min_wait


@pytest.mark.parametrize(("multi_user", "size"), [(False, 72), (True, 288)])
def test_the_grid_is_every_combination_once(multi_user, size):
    points = grid(multi_user)
    assert len(points) == size == len({point_key(point) for point in points})
    assert describe("grid", multi_user).grid_points == size


def test_a_grid_larger_than_the_trials_is_sampled_with_the_seed():
    points = grid(False)
    assert grid_sample(points, 100, seed=0) == points
    sampled = grid_sample(points, 10, seed=0)
    assert len(sampled) == 10 and sampled == grid_sample(points, 10, seed=0)
    assert sampled != grid_sample(points, 10, seed=1)
    assert sampled == [point for point in points if point in sampled]  # in grid order


def test_equal_points_have_one_key():
    assert point_key({"min_runtime": 0, "las_thresholds": [60]}) == point_key(
        {"las_thresholds": (60.0,), "min_runtime": 0.0}
    )
