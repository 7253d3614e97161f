"""``tune``: the search over the knobs, the hold-out rule, guards, refusals, determinism."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.errors import InvalidTuning
from gpupool.sim.traces import Trace
from gpupool.sim.tuning import ADOPT_MIN, TuneReport, apply_knobs, tune
from gpupool.sim.tuning._replay import ReplayTask, Setup, replay, run_task, window_jobs
from tests.unit.sim.tuning.builders import DAY, POOL, REPLAY, light, medium_heavy

WINDOW = (0.0, 2 * DAY)
HOLDOUT = (2 * DAY, 4 * DAY)
BASE = (DEFAULT_POLICY, Setup(POOL, (), "count", 60.0))  # a replay as tuned() makes it


def tuned(trace: Trace, **options) -> TuneReport:  # noqa: ANN003
    settings = {"trials": 12, "seed": 0, "guards": {}, "workers": 1, **REPLAY}
    settings |= {"window": WINDOW, "holdout": HOLDOUT, **options}
    return tune(trace, POOL, base=DEFAULT_POLICY, **settings)


def same(report: TuneReport) -> dict:
    return {**report.to_dict(), "seconds": None}


@pytest.fixture(scope="module")
def trace() -> Trace:
    return medium_heavy()


@pytest.fixture(scope="module")
def adopted(trace: Trace) -> TuneReport:
    return tuned(trace)


def test_the_search_finds_a_setting_better_than_the_defaults_where_they_lose(trace, adopted):
    # the known better setting: medium jobs end in the first level
    known = replace(DEFAULT_POLICY, las_thresholds=(3600.0, 36000.0, 360000.0))
    better = run_task(ReplayTask(window_jobs(trace, *WINDOW), known, BASE[1])).avg_jct
    base, *tried = adopted.trials
    assert better < 0.9 * base.window.avg_jct  # the defaults do lose here
    assert min(trial.window.avg_jct for trial in tried) <= better
    assert adopted.decision == "adopt"
    (chosen,) = [r for r in adopted.rescored if r.knobs == adopted.chosen]
    assert chosen.improvement >= ADOPT_MIN and not chosen.broken
    assert adopted.predicted == chosen.holdout.avg_jct < adopted.base_holdout.avg_jct
    assert apply_knobs(DEFAULT_POLICY, adopted.chosen) != DEFAULT_POLICY


def test_the_report_says_every_trial_and_the_few_rescored(adopted):
    assert [trial.number for trial in adopted.trials] == list(range(13))  # the base and 12
    assert adopted.trials[0].knobs["las_thresholds"] == [1800.0, 36000.0, 360000.0]
    assert 1 <= len(adopted.rescored) <= 3
    (chosen,) = [r for r in adopted.rescored if r.knobs == adopted.chosen]
    assert adopted.reason.startswith(f"trial {chosen.number} lowers the hold-out's avg_jct by")
    assert set(adopted.rescored[0].guards) == {"p95_wait", "worst_team_slowdown"}
    assert adopted.jobs["window"] == len(window_jobs(medium_heavy(), *WINDOW))
    assert adopted.replays >= 1 + 1 + len(adopted.rescored)  # hold-out, base, trials, few


def test_a_setting_that_breaks_a_guard_is_not_adopted(trace):
    # here, what shortens the average lengthens the short jobs' waits behind medium ones
    report = tuned(trace, guards={"p95_wait": 0.10})
    assert report.decision == "keep" and report.chosen is None
    assert "breaks a guard: p95_wait" in report.reason
    assert all(r.broken == ["p95_wait"] for r in report.rescored if r.improvement >= ADOPT_MIN)
    assert report.predicted == report.base_holdout.avg_jct


def test_too_small_an_improvement_keeps_the_base():
    report = tuned(light(), trials=4, window=(0.0, DAY), holdout=(DAY, 2 * DAY))
    assert report.decision == "keep"
    assert "under the 5.0 % needed" in report.reason
    assert report.predicted == report.base_holdout.avg_jct


def test_the_grid_tries_its_points_and_chooses_by_the_same_rule(trace):
    report = tuned(trace, sampler="grid", trials=12)
    assert report.space.grid_points == 72 and len(report.trials) == 13
    assert all(trial.knobs["packing"] == "fgd" for trial in report.trials)
    assert report.decision == "adopt"


def test_the_same_seed_gives_the_same_report_with_two_workers(trace, adopted):
    assert same(tuned(trace, workers=2)) == same(adopted)


def test_another_seed_tries_other_settings(trace, adopted):
    other = tuned(trace, seed=1, trials=4)
    assert [t.knobs for t in other.trials[1:]] != [t.knobs for t in adopted.trials[1:5]]


def observed(trace: Trace, factor: float) -> Trace:
    """``trace`` with the hold-out's JCTs as the base's replay gives them, times ``factor``."""
    held = window_jobs(trace, *HOLDOUT)
    jct = {record.job_id: record.jct * factor for record in replay(ReplayTask(held, *BASE)).records}
    jobs = tuple(replace(job, observed_jct=jct.get(job.job_id)) for job in trace.jobs)
    return Trace("seen", jobs)


def test_a_replay_that_reproduces_the_history_may_tune(trace):
    report = tuned(observed(trace, 1.0), trials=1)
    assert report.fidelity is not None and report.fidelity.trusted
    assert report.fidelity.median_error == 0.0
    assert report.fidelity.jobs == len(window_jobs(trace, *HOLDOUT))
    assert report.decision != "refuse"


def test_a_replay_far_from_the_history_refuses_to_tune(trace):
    report = tuned(observed(trace, 1.5), trials=1)
    assert report.decision == "refuse" and report.trials == []
    assert "median JCT error 33.3 % over" in report.reason
    assert report.fidelity is not None and not report.fidelity.trusted
    assert tuned(trace, trials=1).fidelity is None  # no observed JCT: nothing to check


def test_nothing_to_tune_on_refuses():
    report = tuned(light(), window=(10 * DAY, 11 * DAY), holdout=(11 * DAY, 12 * DAY))
    assert report.decision == "refuse" and "nothing to tune on" in report.reason
    assert report.predicted is None and report.trials == []
    few = tuned(light(), window=(0.0, 20000.0), holdout=(DAY, 2 * DAY))  # 17 jobs
    assert few.decision == "refuse"
    assert few.reason.startswith("nothing to tune on: the window has 17 finished jobs")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"objective": "throughput"}, "objective 'throughput'"),
        ({"sampler": "random"}, "sampler 'random'"),
        ({"trials": 0}, "trials 0"),
        ({"workers": 0}, "workers 0"),
        ({"guards": {"utilisation": 0.1}}, "guard 'utilisation'"),
        ({"guards": {"p95_wait": -1}}, "guard p95_wait=-1"),
        ({"window": (5.0, 1.0)}, "window"),
        ({"placement": "anywhere"}, "placement 'anywhere'"),
    ],
)
def test_options_it_cannot_run_with_are_refused_with_their_name(options, named):
    with pytest.raises(InvalidTuning, match=named) as raised:
        tuned(light(), **options)
    assert raised.value.code == "invalid_tuning" and raised.value.status == 422
