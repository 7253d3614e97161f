"""JupyterLab notebooks: started, stopped and resumed as jobs, watched for idleness.

Starting, listing, stopping and resuming notebooks, and where the proxy reaches one
(``_notebooks``); the watch that stops notebooks that hold GPUs and idle (``_notebook_watch``).
It imports ``services.core``, ``jobs`` (a notebook is a listening job) and ``metrics`` (its
GPUs' busy share); nothing else in services builds on it but the composition root.
"""

from __future__ import annotations

from gpupool.services.notebooks._notebook_watch import IdleWatch
from gpupool.services.notebooks._notebooks import (
    Upstream,
    idle_gpus,
    list_notebooks,
    resume_notebook,
    show_notebook,
    start_notebook,
    stop_notebook,
    upstream,
)

__all__ = [
    "IdleWatch",
    "Upstream",
    "idle_gpus",
    "list_notebooks",
    "resume_notebook",
    "show_notebook",
    "start_notebook",
    "stop_notebook",
    "upstream",
]
