"""Experiments: hyper-parameter searches whose trials are ordinary jobs.

What users do with them (``_experiments``: create, list, show, pause, resume, stop), their
read models (``_views``), and the experiments pipeline's rules (``_progress``: each pass
follows every active experiment's trials from their jobs, judges them -- successive halving
in ``_rungs``, Optuna's pruners in ``_studies`` -- and asks Optuna's samplers for new
points, ``_decide``); what its calls need of the server (``_ports``). gpupool's tables are the
truth: the Optuna study an experiment's pass uses is rebuilt from them whenever missing. It
imports ``services.core``, ``services.identity`` and ``services.jobs``.
"""

from __future__ import annotations

from gpupool.services.experiments._curves import CurvesView, TrialCurve, curves
from gpupool.services.experiments._experiments import (
    create,
    find,
    list_experiments,
    new_experiment,
    pause,
    resume,
    show,
    stop,
)
from gpupool.services.experiments._ports import Runs, Wakes
from gpupool.services.experiments._progress import Progress, trial_env

__all__ = [
    "CurvesView",
    "Progress",
    "Runs",
    "TrialCurve",
    "Wakes",
    "create",
    "curves",
    "find",
    "list_experiments",
    "new_experiment",
    "pause",
    "resume",
    "show",
    "stop",
    "trial_env",
]
