"""Optuna's side of an experiment: its samplers ask, its pruners judge (median, Hyperband).

gpupool's tables are the truth; a study is only a working copy, held in memory by the
experiments pipeline and rebuilt from the trials (``rebuild``) whenever it is missing -- at
start, or after a write that failed -- so a restart loses nothing. Trials never talk to the
study: the pipeline tells it what their jobs reported.

Each ask gets a sampler seeded with the experiment's seed and the trial's number, so the
points of random and grid searches depend on nothing but the seed, whatever order trials
end in or however often the server restarts (qmc's sequence is indexed by trial number
already; tpe and cmaes learn from the trials that have ended when asked, so their points
depend on that too). CMA-ES's distribution lives in Optuna's trials, not in the tables: a
rebuild asks its trials again, in the order the pipeline did (``Study._replay``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from gpupool.domain.experiments import ExperimentSpec, Parameter

optuna.logging.set_verbosity(logging.WARNING)  # the server's log, not one line per trial

FINISHED = {
    "completed": TrialState.COMPLETE,
    "early_stopped": TrialState.PRUNED,
    "failed": TrialState.FAIL,
    "cancelled": TrialState.FAIL,
}


@dataclass(frozen=True)
class KnownTrial:
    """A trial as the tables hold it, enough to put it back into a study."""

    number: int
    params: dict[str, Any]
    state: str
    value: float | None
    curve: Sequence[tuple[float, float]]


class Study:
    """One experiment's Optuna study: ``ask`` the next point, ``tell`` how a trial ended,
    ``report`` its points and ask the pruner whether to stop it."""

    def __init__(self, experiment_id: int, spec: ExperimentSpec) -> None:
        self.spec = spec
        self.space = {name: distribution(p) for name, p in spec.parameters.items()}
        self.study = optuna.create_study(
            study_name=f"experiment-{experiment_id}",
            direction=spec.objective.direction,
            sampler=sampler(spec, 0),
            pruner=pruner(spec),
        )
        self._ids: dict[int, int] = {}  # our trial number -> Optuna's trial id
        self._reported: dict[int, int] = {}  # points of each trial told so far

    @classmethod
    def rebuild(cls, experiment_id: int, spec: ExperimentSpec, trials: Sequence[KnownTrial]):
        """The study as it was: every trial put back in number order, with its state,
        value and reported points (``Study``); cmaes's asked and told again (``_replay``)."""
        study = cls(experiment_id, spec)
        ordered = sorted(trials, key=lambda t: t.number)
        if spec.sampler.name == "cmaes":
            study._replay(ordered)
        else:
            for trial in ordered:
                study._put_back(trial)
        return study

    def ask(self, number: int) -> dict[str, Any]:
        """The point of trial ``number`` (the next one: numbers go 1, 2, 3, ...)."""
        # not ``study.trials``: that deep-copies every trial, ~0.1 s an ask at 1,000 trials
        expected = len(self.study.get_trials(deepcopy=False)) + 1
        if number != expected:
            raise ValueError(f"trial {number} asked for, but the study is at {expected}")
        self.study.sampler = sampler(self.spec, number)
        trial = self.study.ask(self.space)
        self._ids[number] = trial._trial_id
        return dict(trial.params)

    def tell(
        self,
        number: int,
        state: str,
        value: float | None,
        points: Sequence[tuple[float, float]] = (),
    ) -> None:
        """Trial ``number`` ended: completed with ``value``, early stopped, failed; its
        ``points`` not reported yet are reported first (TPE ranks the trials it did not
        see complete by how far they got, as a rebuilt study, which has every curve)."""
        optuna_state = FINISHED[state]
        told = value if optuna_state is TrialState.COMPLETE else None
        if points:
            self._report(optuna.trial.Trial(self.study, self._ids[number]), number, points)
        if isinstance(self.study.sampler, optuna.samplers.GridSampler):
            # its after_trial stops the study once the grid is used up, which Optuna allows
            # only inside optimize(); each ask sets its own sampler again
            self.study.sampler = optuna.samplers.RandomSampler()
        self.study.tell(self._ids[number], told, state=optuna_state, skip_if_finished=True)

    def should_stop(self, number: int, points: Sequence[tuple[float, float]]) -> bool:
        """Report the points not told yet and ask the pruner (median, Hyperband)."""
        trial = optuna.trial.Trial(self.study, self._ids[number])
        self._report(trial, number, points)
        return bool(points) and trial.should_prune()

    def _report(
        self, trial: optuna.trial.Trial, number: int, points: Sequence[tuple[float, float]]
    ) -> None:
        told = self._reported.get(number, 0)
        steps = {int(time) for time, _ in points[:told]}  # a step's first value, as _steps
        for time, value in points[told:]:
            if int(time) not in steps:
                steps.add(int(time))
                trial.report(value, int(time))
        self._reported[number] = len(points)

    def _replay(self, trials: Sequence[KnownTrial]) -> None:
        """CMA-ES keeps its distribution in its trials' system attributes, which the tables
        do not hold: put back as they are, it would start again from the middle of the
        space. So the trials it learns from (completed, and those still running, which may
        complete) are asked again in number order (CMA-ES moving on as it did) and given
        their own points, and told how they ended once the ``max_concurrent`` trials after
        them were made: the order of the pipeline's asks and tells (a pass asks, then
        tells) when trials end in number order. The others (stopped, failed) are put back:
        CMA-ES neither learns from them nor keeps its state where it can find it again."""
        lag = self.spec.max_concurrent
        # one sampler: its seed only picks the points thrown away (each trial keeps its own)
        self.study.sampler = sampler(self.spec, 0)
        for index, known in enumerate(trials):
            if known.state in FINISHED and known.state != "completed":
                self._put_back(known)
            else:
                self._ask_again(known)
            if index >= lag and trials[index - lag].state == "completed":
                self.tell(trials[index - lag].number, "completed", trials[index - lag].value)
        for known in trials[max(0, len(trials) - lag) :]:
            if known.state == "completed":
                self.tell(known.number, "completed", known.value)

    def _ask_again(self, known: KnownTrial) -> None:
        trial = self.study.ask()
        trial.relative_params  # noqa: B018 -- CMA-ES samples here, moving its generation on
        storage, trial_id = self.study._storage, trial._trial_id
        for name, value in known.params.items():
            space = self.space[name]
            storage.set_trial_param(trial_id, name, space.to_internal_repr(value), space)
        for step, value in _steps(known.curve).items():
            storage.set_trial_intermediate_value(trial_id, step, value)
        self._ids[known.number] = trial_id
        self._reported[known.number] = len(known.curve)

    def _put_back(self, known: KnownTrial) -> None:
        state = FINISHED.get(known.state, TrialState.RUNNING)
        frozen = optuna.trial.create_trial(
            state=state,
            value=known.value if state is TrialState.COMPLETE else None,
            params=known.params,
            distributions=self.space,
            intermediate_values=_steps(known.curve),
        )
        self.study.add_trial(frozen)
        self._ids[known.number] = self.study._storage.get_all_trials(
            self.study._study_id, deepcopy=False
        )[-1]._trial_id
        self._reported[known.number] = len(known.curve)


def _steps(curve: Sequence[tuple[float, float]]) -> dict[int, float]:
    """A curve's points as Optuna's steps (the first value of a step, as ``report``)."""
    steps: dict[int, float] = {}
    for time, value in curve:
        steps.setdefault(int(time), value)
    return steps


def distribution(parameter: Parameter) -> BaseDistribution:
    if parameter.type == "categorical":
        return CategoricalDistribution(list(parameter.choices or []))
    low, high = parameter.low, parameter.high
    assert low is not None and high is not None
    if parameter.type == "int":
        return IntDistribution(
            int(low), int(high), log=parameter.log, step=int(parameter.step or 1)
        )
    return FloatDistribution(low, high, log=parameter.log, step=parameter.step)


def sampler(spec: ExperimentSpec, number: int) -> optuna.samplers.BaseSampler:
    """The sampler that picks trial ``number``'s point, seeded by the experiment's seed and
    that number (qmc: by the seed alone, its sequence indexed by the trial's number)."""
    seed = _seed(spec.sampler.seed, number)
    name = spec.sampler.name
    space = {n: distribution(p) for n, p in spec.parameters.items()}
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        space = {n: p.grid() for n, p in spec.parameters.items()}
        return optuna.samplers.GridSampler(space, seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=spec.sampler.seed, warn_independent_sampling=False)
    if name == "cmaes":
        return _KnownSpaceCmaEs(space, seed=seed, warn_independent_sampling=False)
    return _KnownSpaceTPE(space, seed=seed, constant_liar=True)


class _KnownSpaceTPE(optuna.samplers.TPESampler):
    """Optuna's TPE (multivariate, with the constant liar) told its search space rather than
    inferring it: every trial of an experiment has the same parameters, so the space Optuna
    infers (the intersection of every finished trial's) is the spec's, sorted by name, once
    ten trials have ended. Inferring it scanned every trial at each ask (~30 % of an ask at
    1,000 trials); the points are the same (tests/unit/services/experiments/test_studies.py).
    """

    def __init__(self, space: dict[str, BaseDistribution], **options: Any) -> None:
        super().__init__(**options)
        self._known = {name: space[name] for name in sorted(space) if not space[name].single()}

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._known)


class _KnownSpaceCmaEs(optuna.samplers.CmaEsSampler):
    """Optuna's CMA-ES told its search space (the floats and ints; categorical parameters
    go to its independent sampler, as when inferred), for the same reason as TPE's."""

    def __init__(self, space: dict[str, BaseDistribution], **options: Any) -> None:
        super().__init__(**options)
        numeric = (FloatDistribution, IntDistribution)
        self._known = {
            name: space[name]
            for name in sorted(space)
            if isinstance(space[name], numeric) and not space[name].single()
        }

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._known)


def pruner(spec: ExperimentSpec) -> optuna.pruners.BasePruner:
    """Optuna's pruner for the median rule and Hyperband; none for ASHA, which gpupool
    decides itself (``_rungs``), and for no stopping."""
    stopping = spec.stopping
    if stopping.name == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=stopping.min_trials, n_warmup_steps=int(stopping.grace)
        )
    if stopping.name == "hyperband":
        assert stopping.max_time is not None
        return optuna.pruners.HyperbandPruner(
            min_resource=max(1, int(stopping.grace)),
            max_resource=int(stopping.max_time),
            reduction_factor=int(stopping.reduction_factor),
        )
    return optuna.pruners.NopPruner()


def _seed(seed: int | None, number: int) -> int | None:
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def frozen_trials(study: Study) -> list[FrozenTrial]:
    return study.study.get_trials(deepcopy=False)
