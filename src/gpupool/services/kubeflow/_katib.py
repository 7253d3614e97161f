"""Katib's Experiment (``kubeflow.org/v1beta1``, Katib's ``experiment_types.go`` and
``common_types.go``) as a gpupool experiment: an ``ExperimentSpec`` and the notices of the
fields gpupool does not honour.

* ``objective``: ``type`` -> direction, ``goal``, ``objectiveMetricName`` -> the metric.
  Katib takes a trial's best value of it by default (``metricStrategies``: min or max);
  gpupool its last, so only ``latest`` is honoured as written.
* ``algorithm``: random, grid, tpe, cmaes as Optuna's; sobol as its quasi-Monte Carlo
  sampler (Sobol's sequence); multivariate-tpe as tpe; ``random_state`` (or ``seed``) -> the
  sampler's seed. Bayesian optimization, Hyperband, ENAS, DARTS and PBT are refused
  (``katib_algorithm_not_supported``).
* ``earlyStopping`` medianstop -> the median rule (``min_trials_required`` -> min_trials,
  ``start_step`` -> grace, both Katib's defaults when not given).
* ``parallelTrialCount``, ``maxTrialCount``, ``maxFailedTrialCount`` -> max_concurrent,
  max_trials, max_failed; ``parameters`` (double, int, categorical, discrete; min, max, step,
  list; uniform or logUniform) -> parameters; ``trialTemplate`` -> the trial (``_katib_trials``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gpupool.domain.experiments import PARAM_NAME, ExperimentSpec, Parameter
from gpupool.domain.jobfiles import Notice
from gpupool.errors import KatibAlgorithmNotSupported, KubeflowInvalid, KubeflowNotSupported
from gpupool.services.kubeflow._fields import At, Fields
from gpupool.services.kubeflow._katib_trials import Options, Runtimes, read_trial
from gpupool.services.kubeflow._policies import read_metadata
from gpupool.services.kubeflow._ports import Lookups

API_VERSION = "kubeflow.org/v1beta1"
KIND = "Experiment"
SAMPLERS: Mapping[str, str] = {
    "random": "random",
    "grid": "grid",
    "tpe": "tpe",
    "multivariate-tpe": "tpe",
    "cmaes": "cmaes",
    "sobol": "qmc",
}
REFUSED: Mapping[str, str] = {
    "bayesianoptimization": "use tpe, a model-based search of Optuna's",
    "hyperband": "use random (or tpe) in a gpupool Experiment document, with its stopping "
    "hyperband, which stops trials early instead of setting their budget",
    "enas": "neural architecture search is not gpupool's",
    "darts": "neural architecture search is not gpupool's",
    "pbt": "gpupool's trials are independent jobs that share no checkpoints: use random or "
    "tpe with the early stopping medianstop",
}
SEEDS = ("random_state", "seed")
MEDIAN = "medianstop"
MEDIAN_SETTINGS = "gpupool's median rule takes min_trials_required and start_step"
MEDIAN_DEFAULTS = {"min_trials_required": 3, "start_step": 4}  # Katib's medianstop service
DEFAULT_PARALLEL = 3  # Katib's DefaultTrialParallelCount
TYPES = ("double", "int", "categorical", "discrete")
NAS = "neural architecture search (nasConfig) is not gpupool's: give spec.parameters"
RESUME = (
    "gpupool keeps an experiment's trials in its own tables: pause and resume it with "
    "'gpupool experiment pause' and 'resume'; an ended experiment is not resumed"
)
MORE_METRICS = (
    "gpupool keeps every metric a trial reports with gpupool.metrics.log; only the objective "
    "decides"
)


def experiment_from_katib(
    document: dict[str, Any],
    lookups: Lookups,
    ignore_image: bool = False,
    runtimes: Runtimes | None = None,
) -> tuple[ExperimentSpec, list[Notice]]:
    """The gpupool experiment of a Katib Experiment ``document`` (as read from YAML), and a
    notice for each of its fields gpupool does not honour. ``lookups`` finds the image the
    trial's container names (``ignore_image``: run on the nodes' own system instead);
    ``runtimes``: the file's Trainer runtimes, for a trialSpec that is a TrainJob. Raises a
    4xx (KubeflowInvalid, KubeflowNotSupported, KatibAlgorithmNotSupported, ...) whose field
    is the manifest's own path."""
    fields = Fields(document)
    root = fields.root()
    _check_kind(root)
    metadata = read_metadata(root)
    spec = root.map("spec")
    if spec is None or not metadata.name:
        raise root.invalid("spec" if spec is None else "metadata", "the experiment's name and spec")
    spec.refuse("nasConfig", KubeflowNotSupported, NAS)
    names, parameters = read_parameters(spec)
    trial = read_trial(spec, names, metadata, lookups, _options(document, ignore_image, runtimes))
    _unused(spec, names, trial.used)
    experiment = _validated(
        {
            "name": metadata.name,
            "team": trial.team,
            "objective": read_objective(spec),
            "parameters": parameters,
            "sampler": read_algorithm(spec),
            "stopping": read_early_stopping(spec),
            **read_counts(spec),
            "trial": trial.job,
        },
        spec,
    )
    _other_fields(spec, experiment)
    return experiment, fields.all_notices()


def _options(document: dict[str, Any], ignore_image: bool, runtimes: Runtimes | None) -> Options:
    namespace = (document.get("metadata") or {}).get("namespace")
    return Options(ignore_image, runtimes, namespace if isinstance(namespace, str) else None)


def _check_kind(root: At) -> None:
    version, kind = root.value.get("apiVersion"), root.value.get("kind")
    if (version, kind) != (API_VERSION, KIND):
        raise root.invalid("kind", f"{KIND} of {API_VERSION} (Katib's), not {kind} of {version}")


# -- the objective ----------------------------------------------------------------------------


def read_objective(spec: At) -> dict[str, Any]:
    """``spec.objective`` as gpupool's objective; notices for what it does not honour."""
    objective = spec.map("objective")
    if objective is None:
        raise spec.invalid("objective", "the objective: type, objectiveMetricName")
    direction = objective.text("type")
    if direction not in ("minimize", "maximize"):
        raise objective.invalid("type", "minimize or maximize")
    metric = objective.text("objectiveMetricName")
    if not metric:
        raise objective.invalid("objectiveMetricName", "the metric the trials report")
    objective.ignore("additionalMetricNames", MORE_METRICS)
    _strategies(objective, metric, direction)
    return {"metric": metric, "direction": direction, "goal": _goal(objective)}


def _goal(objective: At) -> float | None:
    goal = objective.raw("goal")
    if goal is None:
        return None
    if isinstance(goal, bool) or not isinstance(goal, int | float):
        raise objective.invalid("goal", "a number")
    return float(goal)


def _strategies(objective: At, metric: str, direction: str) -> None:
    """Katib extracts a trial's value by ``metricStrategies`` (the objective's default: its
    best, min or max); gpupool judges a trial by the last value it reported."""
    written = False
    for item in objective.maps("metricStrategies"):
        name, value = item.text("name"), item.text("value")
        written = written or name == metric
        if name == metric and value != "latest":
            item.fields.notice((*item.path, "value"), _last_value(metric, str(value)))
        elif name != metric:
            item.fields.notice(item.path, MORE_METRICS)
    if not written:
        best = "min" if direction == "minimize" else "max"
        objective.fields.note(objective.where("metricStrategies"), _last_value(metric, best))


def _last_value(metric: str, strategy: str) -> str:
    return (
        f"Katib takes a trial's {strategy} of {metric}; gpupool takes the last value it "
        f"reports: report the {strategy} so far last, or make {metric} the value to judge"
    )


# -- the search space -------------------------------------------------------------------------


def read_parameters(spec: At) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """``spec.parameters``: Katib's name -> gpupool's (renamed where Katib allows what a
    ``${params.NAME}`` does not), and each parameter as gpupool's, by gpupool's name."""
    names: dict[str, str] = {}
    parameters: dict[str, dict[str, Any]] = {}
    items = spec.maps("parameters")
    if not items:
        raise spec.invalid("parameters", "the parameters to search")
    for item in items:
        katib, name = _names(item)
        if katib in names or name in parameters:
            raise item.invalid("name", f"a name of its own: {name} is given twice")
        names[katib] = name
        parameters[name] = _parameter(item)
    return names, parameters


def _names(item: At) -> tuple[str, str]:
    katib = item.text("name")
    if not katib:
        raise item.invalid("name", "the parameter's name")
    name = re.sub(r"[^A-Za-z0-9_]", "_", katib)[:64]
    name = name if re.match(r"^[A-Za-z_]", name) else f"_{name}"[:64]
    if not re.match(PARAM_NAME, name):  # pragma: no cover - the lines above make it one
        raise item.invalid("name", "letters, digits and _")
    if name != katib:
        item.fields.notice(
            (*item.path, "name"),
            f"gpupool names it {name} (letters, digits and _): in GPUPOOL_PARAMS and the "
            "experiment's views",
        )
    return katib, name


def _parameter(item: At) -> dict[str, Any]:
    kind = item.text("parameterType")
    space = item.map("feasibleSpace")
    if kind not in TYPES:
        raise item.invalid("parameterType", ", ".join(TYPES))
    if space is None:
        raise item.invalid("feasibleSpace", "the parameter's feasibleSpace")
    body = _choices(space, kind) if kind in ("categorical", "discrete") else _range(space, kind)
    try:
        return Parameter.model_validate(body).model_dump(mode="json", exclude_defaults=True)
    except ValidationError as error:
        message = str(error.errors()[0].get("msg", "invalid")).removeprefix("Value error, ")
        raise item.invalid("feasibleSpace", f"a space gpupool can search: {message}") from None


def _choices(space: At, kind: str) -> dict[str, Any]:
    for key in ("min", "max", "step"):
        if space.has(key):
            raise space.invalid(key, f"only list for a {kind} parameter")
    space.ignore("distribution", f"a {kind} parameter's values are picked among its list")
    values = space.strings("list")
    if not values:
        raise space.invalid("list", "the values to pick from")
    if kind == "categorical":
        return {"type": "categorical", "choices": list(values)}
    return {"type": "categorical", "choices": [_number(space, "list", v) for v in values]}


def _range(space: At, kind: str) -> dict[str, Any]:
    if space.has("list"):
        raise space.invalid("list", f"min and max (and step) for a {kind} parameter")
    low, high = _bound(space, "min"), _bound(space, "max")
    step = _number(space, "step", space.raw("step")) if space.has("step") else None
    log = _log(space)
    if log and step is not None:
        space.fields.notice((*space.path, "step"), "a log-uniform search takes no step")
        step = None
    kind = "float" if kind == "double" else "int"
    return {"type": kind, "low": low, "high": high, "step": step, "log": log}


def _bound(space: At, key: str) -> int | float:
    if not space.has(key):
        raise space.invalid(key, "min and max")
    return _number(space, key, space.raw(key))


def _number(space: At, key: str, value: object) -> int | float:
    """A number as Katib writes one (a string, "0.01"; a number is taken too)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    text = value.strip() if isinstance(value, str) else ""
    try:
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    except ValueError:
        raise space.invalid(key, f'a number written as a string ("0.01"), not {value!r}') from None


def _log(space: At) -> bool:
    distribution = space.text("distribution") or "uniform"
    if distribution in ("normal", "logNormal"):
        raise space.error(
            "distribution",
            KubeflowNotSupported,
            f"gpupool samples within [min, max], uniformly or log-uniformly, not from a "
            f"{distribution} distribution: use uniform or logUniform",
        )
    if distribution not in ("uniform", "logUniform", "unknown"):
        raise space.invalid("distribution", "uniform or logUniform")
    return distribution == "logUniform"


def _unused(spec: At, names: Mapping[str, str], used: frozenset[str]) -> None:
    for index, (katib, name) in enumerate(names.items()):
        if name not in used:
            spec.fields.notice(
                ("spec", "parameters", index, "name"),
                f"no trialParameter refers to {katib}: a trial sees it in GPUPOOL_PARAMS only",
            )


# -- the algorithms ---------------------------------------------------------------------------


def read_algorithm(spec: At) -> dict[str, Any]:
    """``spec.algorithm`` as gpupool's sampler."""
    algorithm = spec.map("algorithm")
    if algorithm is None:
        raise spec.invalid("algorithm", "the algorithm: algorithmName")
    name = algorithm.text("algorithmName") or ""
    if name not in SAMPLERS:
        raise _refused(algorithm, name, REFUSED.get(name, f"use one of {', '.join(SAMPLERS)}"))
    if name == "multivariate-tpe":
        algorithm.fields.notice(
            (*algorithm.path, "algorithmName"),
            "gpupool runs Optuna's TPE over each parameter alone (not multivariate)",
        )
    seed = _settings(algorithm, SEEDS, f"gpupool runs Optuna's {SAMPLERS[name]} as it comes")
    return {"name": SAMPLERS[name], "seed": seed.get("random_state", seed.get("seed"))}


def _refused(at: At, name: str, advice: str) -> KatibAlgorithmNotSupported:
    error = at.error(
        "algorithmName",
        KatibAlgorithmNotSupported,
        f"gpupool does not run {name or 'an unnamed algorithm'}: {advice}",
    )
    assert isinstance(error, KatibAlgorithmNotSupported)
    return error


def _settings(at: At, known: tuple[str, ...], otherwise: str) -> dict[str, int]:
    """The ``algorithmSettings`` named in ``known`` (whole numbers of 0 or more); a notice
    for each other one."""
    found: dict[str, int] = {}
    for item in at.maps("algorithmSettings"):
        name, value = item.text("name") or "", item.raw("value")
        if name not in known:
            item.fields.notice(item.path, f"{name}: {otherwise}")
            continue
        number = _number(item, "value", value)
        if not isinstance(number, int) or not 0 <= number <= 2**32 - 1:
            raise item.invalid("value", f"{name}: a whole number of 0 or more")
        found[name] = number
    return found


def read_early_stopping(spec: At) -> dict[str, Any]:
    """``spec.earlyStopping`` medianstop as the median rule, judged at the trials' steps."""
    stopping = spec.map("earlyStopping")
    if stopping is None:
        return {"name": "none"}
    name = stopping.text("algorithmName") or ""
    if name != MEDIAN:
        raise _refused(stopping, name, f"use {MEDIAN}, or leave earlyStopping out")
    settings = {**MEDIAN_DEFAULTS, **_settings(stopping, tuple(MEDIAN_DEFAULTS), MEDIAN_SETTINGS)}
    stopping.fields.note(
        stopping.where("algorithmName"),
        "gpupool stops a trial worse than the median of earlier trials at the same step "
        "(Optuna's median rule; Katib compares averages of the first start_step values): "
        "trials report their step with gpupool.metrics.log(step=N, ...)",
    )
    return {
        "name": "median",
        "time_metric": "step",
        "min_trials": max(1, settings["min_trials_required"]),
        "grace": float(settings["start_step"]),
    }


# -- the counts and the rest ------------------------------------------------------------------


def read_counts(spec: At) -> dict[str, Any]:
    """``parallelTrialCount`` (Katib's default 3), ``maxTrialCount`` (gpupool's default
    when not given, noticed), ``maxFailedTrialCount`` (none given: no limit)."""
    parallel = spec.number("parallelTrialCount", least=1)
    most = spec.number("maxTrialCount", least=1)
    failed = spec.number("maxFailedTrialCount")
    counts: dict[str, Any] = {"max_concurrent": parallel or DEFAULT_PARALLEL}
    if most is None:
        default = ExperimentSpec.model_fields["max_trials"].default
        spec.fields.note(
            spec.where("maxTrialCount"),
            f"not given: gpupool makes at most {default} trials (give maxTrialCount)",
        )
    else:
        counts["max_trials"] = most
    limit = most if most is not None else ExperimentSpec.model_fields["max_trials"].default
    counts["max_failed"] = failed if failed is not None else limit
    return counts


def _other_fields(spec: At, experiment: ExperimentSpec) -> None:
    metric = experiment.objective.metric
    spec.ignore("resumePolicy", RESUME)
    spec.fields.notice(
        (*spec.path, "metricsCollectorSpec"),
        f"gpupool does not read metrics from a trial's output or files (Katib's StdOut "
        f"collector and others): the trial reports {metric} with "
        f"gpupool.metrics.log({metric}=value) (or writes its JSON lines to "
        "$GPUPOOL_METRICS_FILE)",
    )
    if experiment.sampler.name == "grid":
        _grid(spec, experiment)


def _grid(spec: At, experiment: ExperimentSpec) -> None:
    """Katib refuses a grid of fewer points than maxTrialCount; gpupool runs them all."""
    points = math.prod(_points(p) for p in experiment.parameters.values())
    if points < experiment.max_trials:
        spec.fields.note(
            spec.where("maxTrialCount"),
            f"the grid has {points} points: the experiment ends after {points} trials",
        )


def _points(parameter: Parameter) -> int:
    """The values of ``parameter`` on a grid, counted (as ``Parameter.grid`` makes them,
    without making a list of a grid that may be huge)."""
    if parameter.choices is not None:
        return len(parameter.choices)
    assert parameter.low is not None and parameter.high is not None
    step = parameter.step or 1
    return math.floor((parameter.high - parameter.low) / step + 1e-9) + 1


def _validated(body: dict[str, Any], spec: At) -> ExperimentSpec:
    """The experiment; a problem of it as KubeflowInvalid, said to be of the gpupool
    experiment the manifest translates to."""
    try:
        return ExperimentSpec.model_validate(body)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem.get("loc", ()))
        message = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        text = f"the gpupool experiment it translates to: {where or 'spec'}: {message}"
        raise KubeflowInvalid(text, fields=[{"field": "spec", "message": message}]) from None
