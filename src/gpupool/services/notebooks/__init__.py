"""JupyterLab notebooks: started, stopped and resumed as jobs, watched for idleness.

Starting, listing, stopping and resuming notebooks (``_notebooks``); their routes in the
proxy's table and who may use them (``_routes``: ``NotebookRoutes`` publishes, ``admit`` is
the table's rule for notebooks, ``not_served`` says why one has none; the pipeline that
publishes is ``gpupool.loops.notebook_routes``); how notebooks that hold GPUs and idle are
found and stopped (``_idleness``: its rules; the pipeline that runs them is
``gpupool.loops.notebook_idle``). It imports ``services.core``, ``jobs`` (a notebook is a
listening job), ``metrics`` (its GPUs' busy share) and the proxy's table; nothing else in
services builds on it but the composition root.
"""

from __future__ import annotations

from gpupool.services.notebooks._idleness import (
    Look,
    Seen,
    judge_idleness,
    kernels_of,
    looks,
    record_idleness,
)
from gpupool.services.notebooks._idleness import interval as idle_interval
from gpupool.services.notebooks._notebooks import (
    idle_gpus,
    list_notebooks,
    resume_notebook,
    settle,
    show_notebook,
    start_notebook,
    stop_notebook,
)
from gpupool.services.notebooks._notebooks import start as new_notebook
from gpupool.services.notebooks._ports import NotebookSide, NotebookStops
from gpupool.services.notebooks._routes import NotebookRoutes, admit, not_served

__all__ = [
    "Look",
    "Seen",
    "NotebookRoutes",
    "NotebookSide",
    "NotebookStops",
    "admit",
    "idle_gpus",
    "idle_interval",
    "judge_idleness",
    "kernels_of",
    "list_notebooks",
    "new_notebook",
    "looks",
    "not_served",
    "record_idleness",
    "resume_notebook",
    "settle",
    "show_notebook",
    "start_notebook",
    "stop_notebook",
]
