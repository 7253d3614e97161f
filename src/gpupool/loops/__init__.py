"""The background pipelines of the server: load -> slow work outside any transaction ->
apply, guarded by the attempt (or a conditional update).

The control pipelines, run in order in one control thread by the ``Driver``: re-adoption
at start (``readopt``), ``reconcile``, ``stops``, ``checkpoints``, ``schedule`` (snapshot ->
pure scheduler -> reasons) and ``launch`` (claim -> launch -> failures), sharing the table of
active attempts (``active``); ``control`` builds them, ``face`` is what services see of them
(``services.core.LoopSide``). Beside the control thread, each in a thread of its own
(``watch.Watch``): metric ingest (``ingest``), ``rollouts``, notebooks' idleness
(``notebook_idle``), ``storage``, this node's ``discovery`` and, on a Ray pool, its
``nodes`` and head. How a transition, a stop, a checkpoint, a rollout step or a team's usage
is recorded is the business of ``services``; when it runs, what it loads and in which
transaction it applies is the pipeline's. This package imports services, store, scheduler,
executors (and cluster and discovery, for the pool's watches and this node's discovery);
nothing but the composition root (``gpupool.platform``) imports it.
"""

from __future__ import annotations

from gpupool.loops.control import Control
from gpupool.loops.face import LoopFace

__all__ = ["Control", "LoopFace"]
