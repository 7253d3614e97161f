"""An experiment's Optuna study: asking for the next point stays cheap however many trials
the study holds (the pipeline asks inside its pass; benchmarks/experiments.py, aim 4)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import optuna
import pytest
from optuna.trial import FrozenTrial

from gpupool.domain.experiments import ExperimentSpec
from gpupool.services.experiments import _studies
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


def two(sampler: str, **more: Any) -> ExperimentSpec:
    """``spec`` with a second parameter, ``y`` (CMA-ES needs two)."""
    body = spec(sampler).model_dump()
    body["parameters"]["y"] = {"type": "float", "low": 0.0, "high": 1.0}
    return ExperimentSpec.model_validate({**body, **more})


@pytest.mark.parametrize(
    ("sampler", "told"), [("tpe", "_KnownSpaceTPE"), ("cmaes", "_KnownSpaceCmaEs")]
)
def test_a_sampler_told_its_space_asks_the_points_it_would_have_inferred(
    sampler: str, told: str
) -> None:
    # told the experiment's space, TPE and CMA-ES no longer infer it from every finished
    # trial at each ask (a scan of the whole history, ~30 % of a TPE ask at 1,000 trials)
    def points() -> list[dict[str, Any]]:
        states = ["completed", "early_stopped", "running"]
        known = [
            KnownTrial(
                n,
                {"x": n * 37 % 100 / 100, "y": n * 11 % 10 / 10},
                states[n % 3],
                n * 53 % 17 / 17,
                [(1.0, 0.5)],
            )  # fmt: skip
            for n in range(1, 41)
        ]
        study = Study.rebuild(1, two(sampler), known)
        asked = [study.ask(41), study.ask(42)]
        study.tell(41, "completed", 0.01)
        study.tell(42, "early_stopped", None)
        return [*asked, study.ask(43)]

    inferring_class = getattr(_studies, told).__mro__[1]  # Optuna's own

    def inferring(space: Any, **options: Any) -> optuna.samplers.BaseSampler:
        return inferring_class(**options)

    with mock.patch.object(_studies, told, inferring):
        inferred = points()
    assert points() == inferred
    assert len({point["x"] for point in inferred}) == 3


def test_cmaes_goes_on_where_it_was_after_a_rebuild() -> None:
    # CMA-ES keeps its distribution in Optuna's trials, not in gpupool's tables: the rebuild
    # asks its trials again, so that a restart does not send it back to the middle
    cmaes, concurrent = two("cmaes", max_concurrent=4), 4
    live, known = Study(1, cmaes), []
    points = {n: live.ask(n) for n in range(1, concurrent + 1)}
    for n in range(concurrent + 1, 61):  # a pass asks, then tells the trial that ended
        points[n] = live.ask(n)
        ended = n - concurrent
        value = (points[ended]["x"] - 0.9) ** 2 + (points[ended]["y"] - 0.1) ** 2
        state = "early_stopped" if ended % 3 == 0 else "completed"
        live.tell(ended, state, value)
        known.append(KnownTrial(ended, points[ended], state, value, [(1.0, value)]))
    known += [KnownTrial(n, points[n], "running", None, []) for n in range(57, 61)]

    rebuilt = Study.rebuild(1, cmaes, known)
    put_back = Study(1, cmaes)
    for trial in known:
        put_back._put_back(trial)

    expected = live.ask(61)
    assert rebuilt.ask(61) == expected
    assert put_back.ask(61) != expected  # without the replay: CMA-ES from the start


def test_a_cmaes_study_of_every_trial_state_and_a_categorical_parameter_is_rebuilt() -> None:
    body = two("cmaes", max_concurrent=3).model_dump()
    body["parameters"]["act"] = {"type": "categorical", "choices": ["relu", "tanh"]}
    cmaes = ExperimentSpec.model_validate(body)
    states = ["completed", "early_stopped", "failed", "cancelled", "completed", "running"]
    known = [
        KnownTrial(n, {"x": n / 40, "y": 1 - n / 40, "act": "relu"}, states[n % 6],
                   n / 40 if states[n % 6] == "completed" else None, [(1.0, 0.5), (1.0, 0.4)])
        for n in range(1, 31)
    ] + [KnownTrial(31, {"x": 0.5, "y": 0.5, "act": "tanh"}, "pending", None, [])]  # fmt: skip

    study = Study.rebuild(1, cmaes, known)

    point = study.ask(32)
    assert 0.0 <= point["x"] <= 1.0 and point["act"] in ("relu", "tanh")
    study.tell(31, "completed", 0.2)  # a trial put back running is told how it ended
    assert not study.should_stop(29, [(1.0, 0.5), (1.0, 0.4), (2.0, 0.3)])  # no pruner


def test_tpe_told_its_trials_curves_asks_as_it_would_after_a_rebuild() -> None:
    # TPE ranks the trials it did not see complete by how far they got: told their curves
    # as they end, the live study is the one a rebuild makes from the tables
    curves = {n: [(float(t), 1 / (n % 7 + t)) for t in range(1, n % 4 + 2)] for n in range(1, 36)}
    known = []
    live = Study(1, spec("tpe"))
    for n in range(1, 36):
        point, state = live.ask(n), "completed" if n % 15 == 0 else "early_stopped"
        value = curves[n][-1][1] if state == "completed" else None
        live.tell(n, state, value, curves[n])
        known.append(KnownTrial(n, point, state, value, curves[n]))

    assert live.ask(36) == Study.rebuild(1, spec("tpe"), known).ask(36)


def test_telling_every_point_of_a_grid_does_not_stop_the_study() -> None:
    # Optuna's GridSampler stops the study when its grid is used up, which raises outside
    # optimize(): the pipeline's pass that told the last trial failed, and the experiment
    # never ended
    grid = spec("random").model_dump()
    grid["parameters"] = {"x": {"type": "int", "low": 0, "high": 3}}
    grid["sampler"] = {"name": "grid", "seed": 1}
    study = Study(1, ExperimentSpec.model_validate(grid))
    points = [study.ask(number) for number in range(1, 5)]
    for number in range(1, 5):
        study.tell(number, "completed", float(number))
    assert len(points) == 4
