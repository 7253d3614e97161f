"""One pass's decision: a sampler whose ask grows with the history (tpe, cmaes) asks for one
new trial a pass and says there is more to ask (the pipeline passes again at once), so no
pass waits behind a burst of asks; the cheap samplers fill every free place in one pass."""

from __future__ import annotations

import pytest

from gpupool.domain.experiments import ExperimentSpec, ExperimentStatus
from gpupool.services.experiments._decide import COSTLY_ASKS_PER_PASS, Live, TrialRow, decide
from gpupool.services.experiments._studies import Study


def live(sampler: str, max_trials: int = 20) -> Live:
    spec = ExperimentSpec.model_validate(
        {
            "name": "search",
            "objective": {"metric": "loss"},
            "parameters": {"x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.1}},
            "sampler": {"name": sampler, "seed": 1},
            "max_trials": max_trials,
            "max_concurrent": 8,
            "trial": {"command": ["true"]},
        }
    )
    return Live(spec, Study(1, spec))


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_a_costly_sampler_asks_one_trial_a_pass_and_says_there_is_more(sampler: str) -> None:
    state = live(sampler)
    plan = decide(state, ExperimentStatus.RUNNING, 0, [], 0.0)  # 8 places free
    assert ([n for n, _ in plan.new], plan.more) == ([1], True)
    assert COSTLY_ASKS_PER_PASS == 1
    # the trial budget's last place (2 trials in all): nothing more to ask after it
    state = live(sampler, max_trials=2)
    decide(state, ExperimentStatus.RUNNING, 0, [], 0.0)
    plan = decide(state, ExperimentStatus.RUNNING, 1, [], 0.0)
    assert ([n for n, _ in plan.new], plan.more) == ([2], False)


@pytest.mark.parametrize("sampler", ["random", "grid", "qmc"])
def test_a_cheap_sampler_fills_every_free_place_in_one_pass(sampler: str) -> None:
    plan = decide(live(sampler), ExperimentStatus.RUNNING, 0, [], 0.0)
    assert [n for n, _ in plan.new] == list(range(1, 9))
    assert not plan.more


def test_a_paused_experiment_asks_nothing_and_has_nothing_more() -> None:
    plan = decide(live("tpe"), ExperimentStatus.PAUSED, 0, [], 0.0)
    assert (plan.new, plan.more) == ([], False)


def test_a_trial_stopped_early_is_told_to_the_study_with_how_far_it_got() -> None:
    # TPE ranks the trials it did not see complete by their curves: the running pipeline's
    # study must hold what a study rebuilt from the tables holds
    state = live("tpe")
    decide(state, ExperimentStatus.RUNNING, 0, [], 0.0)  # trial 1 asked for
    state.curves[1], state.last[1] = [(1.0, 0.5), (3.0, 0.4)], 0.4
    stopped = TrialRow(1, 10, "running", {}, "cancelled", "EarlyStopped", "rung 1", 5.0, True)
    decide(state, ExperimentStatus.RUNNING, 1, [stopped], 6.0)
    trial = state.study.study.get_trials(deepcopy=False)[0]
    assert (trial.state.name, trial.intermediate_values) == ("PRUNED", {1: 0.5, 3: 0.4})
