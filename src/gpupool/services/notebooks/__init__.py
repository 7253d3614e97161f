"""JupyterLab notebooks: started, stopped and resumed as jobs, watched for idleness.

Starting, listing, stopping and resuming notebooks, and where the proxy reaches one
(``_notebooks``); how notebooks that hold GPUs and idle are found and stopped (``_idleness``:
its rules; the pipeline that runs them is ``gpupool.loops.notebook_idle``). It imports
``services.core``, ``jobs`` (a notebook is a listening job) and ``metrics`` (its GPUs' busy
share); nothing else in services builds on it but the composition root.
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
    Upstream,
    idle_gpus,
    list_notebooks,
    resume_notebook,
    settle,
    show_notebook,
    start_notebook,
    stop_notebook,
    upstream,
)

__all__ = [
    "Look",
    "Seen",
    "Upstream",
    "idle_gpus",
    "idle_interval",
    "judge_idleness",
    "kernels_of",
    "list_notebooks",
    "looks",
    "record_idleness",
    "resume_notebook",
    "settle",
    "show_notebook",
    "start_notebook",
    "stop_notebook",
    "upstream",
]
