"""The experiments' web pages: the experiments of the caller's teams, and one experiment's page
(its trials with their parameters, state, rung and objective; each trial's objective over
time; the parallel coordinates of the parameters against the objective; buttons that pause,
resume and stop it, and a form that registers the best trial's outputs as a model version,
both through the REST API). Read through the same service functions as the REST API; another
team's experiment is a 404 page, as if it did not exist."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gpupool.api import experiment_charts
from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep
from gpupool.api.ui import SignedIn, render, to_login
from gpupool.domain.experiments import ExperimentDetailView, ExperimentSpec, TrialView
from gpupool.domain.jobs import Role
from gpupool.domain.models import NAME_RULE, is_model_name
from gpupool.errors import ClientError
from gpupool.services import experiments
from gpupool.services.core import Principal
from gpupool.services.platform import Platform

router = APIRouter(include_in_schema=False)
PAGE = "experiments"  # the part of the menu these pages are under
SHOWN_TRIALS = 1000  # rows of the trials table (the CLI and the API list them all)
CURVE_POINTS = 100_000  # points of all the curves drawn together, at most 500 per trial


@router.get("/experiments", response_class=HTMLResponse)
@declare(Rule.PAGE)
def experiments_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    found = [e.model_dump(mode="json") for e in experiments.list_experiments(ctx, who)]
    return render("experiments.html", who, csrf, page=PAGE, experiments=found)


@router.get("/experiments/{ref}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def experiment_page(request: Request, ref: str, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    """``ref``: the experiment's id (the list's links), or its name (the newest of that name
    in the caller's teams)."""
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    try:
        shown = experiments.show(ctx, who, ref)
    except ClientError:  # not found, or not visible: the same page
        return render(
            "not_found.html", who, csrf, status=404, page=PAGE, kind="experiment", name=ref
        )
    return render("experiment.html", who, csrf, page=PAGE, **_drawn(ctx, who, shown))


def _drawn(ctx: Platform, who: Principal, shown: ExperimentDetailView) -> dict[str, Any]:
    """What experiment.html shows of ``shown``: its fields, its two charts, its trials."""
    spec = ExperimentSpec.model_validate(shown.spec)
    trials = shown.trial_list
    per_trial = CURVE_POINTS // max(1, len(trials))
    found = experiments.curves(ctx, who, str(shown.id), per_trial)
    best = shown.best.trial if shown.best else None
    return {
        "experiment": shown.model_dump(mode="json", exclude={"trial_list", "spec"}),
        "parameters": list(spec.parameters),
        "time_metric": spec.stopping.time_metric,
        "trials": [_row(t, spec) for t in trials[:SHOWN_TRIALS]],
        "best_trial": next((t.model_dump(mode="json") for t in trials if t.number == best), None),
        "more_trials": max(0, len(trials) - SHOWN_TRIALS),
        "curves": experiment_charts.curve_chart(found, best),
        "parallel": experiment_charts.parallel_chart(spec.parameters, spec.objective, trials, best),
        "seen": json.dumps(fingerprint(shown)),
        "can_act": who.role != Role.VIEWER,  # pause, resume, stop, register the best
        "model_name": shown.name if is_model_name(shown.name) else "",
        "model_rule": NAME_RULE,
    }


def _row(trial: TrialView, spec: ExperimentSpec) -> dict[str, Any]:
    """A row of the trials table: the trial, and each parameter's value as text."""
    shown = {name: experiment_charts.show_value(trial.params.get(name)) for name in spec.parameters}
    return trial.model_dump(mode="json") | {"shown_params": shown}


def fingerprint(shown: ExperimentDetailView) -> list[Any]:
    """What of an experiment, once changed, is worth drawing its page again for: experiment.js
    builds the same list from the REST API's answer (``signature``) and compares the two.
    The sums add in trial order, one by one (no compensated ``sum``), as the script does, so
    equal values give equal doubles on both sides."""
    time, value = 0.0, 0.0
    for trial in shown.trial_list:
        time += trial.time if trial.time is not None else 0.0
        value += trial.value if trial.value is not None else 0.0
    counts = [shown.trials[state] for state in sorted(shown.trials)]
    best = [shown.best.trial, shown.best.value] if shown.best else [None, None]
    # a sum past the largest double is Infinity, which JSON.stringify writes as null
    totals = [total if math.isfinite(total) else None for total in (time, value)]
    return [shown.status.value, *best, counts, *totals]
