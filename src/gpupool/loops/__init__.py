"""The background pipelines of the server: load -> slow work outside any transaction ->
apply, guarded by the attempt (or a conditional update).

The control pipelines, run in order in one control thread by the ``Driver``: re-adoption
at start (``readopt``), ``reconcile``, ``stops``, ``checkpoints``, ``schedule`` (snapshot ->
pure scheduler -> reasons) and ``launch`` (claim -> launch -> failures), sharing the table of
active attempts (``active``); ``control`` builds them, ``face`` is what services see of them
(``services.core.LoopSide``). How a transition, a stop or a checkpoint is recorded is the
business of ``services``; when it runs, what it loads and in which transaction it applies
is the pipeline's. This package imports services, store, scheduler and executors; nothing
but the composition root (``gpupool.platform``) imports it.
"""

from __future__ import annotations

from gpupool.loops.control import Control
from gpupool.loops.face import LoopFace

__all__ = ["Control", "LoopFace"]
