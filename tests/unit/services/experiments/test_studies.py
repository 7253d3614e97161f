"""An experiment's Optuna study: asking for the next point stays cheap however many trials
the study holds (the pipeline asks inside its pass; benchmarks/experiments.py, aim 4)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from optuna.trial import FrozenTrial

from gpupool.domain.experiments import ExperimentSpec
from gpupool.services.experiments._studies import KnownTrial, Study


def spec(sampler: str) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "search",
            "objective": {"metric": "loss"},
            "parameters": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
            "sampler": {"name": sampler, "seed": 1},
            "trial": {"command": ["true"]},
        }
    )


def rebuilt(sampler: str, trials: int) -> Study:
    known = [
        KnownTrial(number, {"x": number / 1000}, "completed", 0.5, [(1.0, 0.9), (2.0, 0.5)])
        for number in range(1, trials + 1)
    ]
    return Study.rebuild(1, spec(sampler), known)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_asking_copies_none_of_the_trials_the_study_holds(sampler: str) -> None:
    # Optuna's ``study.trials`` deep-copies every trial: at 1,000 trials an ask took ~0.1 s
    study = rebuilt(sampler, 200)
    copied: list[int] = []

    def counted(trial: FrozenTrial, memo: dict[int, Any]) -> FrozenTrial:
        copied.append(trial.number)
        return trial

    with mock.patch.object(FrozenTrial, "__deepcopy__", counted, create=True):
        point = study.ask(201)

    assert copied == []
    assert 0.0 <= point["x"] <= 1.0


def test_a_trial_is_asked_for_in_number_order() -> None:
    study = rebuilt("random", 3)
    with pytest.raises(ValueError, match="the study is at 4"):
        study.ask(5)
    assert set(study.ask(4)) == {"x"}
