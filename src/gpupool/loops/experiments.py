"""Experiments: each active experiment's trials followed, judged and made, pass after pass.

A pass every ``INTERVAL_SECONDS`` in a thread of its own, and soon after it is woken: by
attempts starting or ending (the control thread), by metric points kept (metric ingest),
and by a user making, resuming or stopping an experiment. The rules are
``services.experiments.Progress``'s (load → decide, with Optuna's asks outside any
transaction → apply, guarded by the experiment's version); the Optuna studies it holds are
that object's, rebuilt from the tables whenever missing.
"""

from __future__ import annotations

from gpupool.loops.watch import Watch
from gpupool.services import experiments
from gpupool.services.core import Submits

INTERVAL_SECONDS = 1.0
MIN_REST_SECONDS = 0.1  # woken by every batch of points: at most this often


class Experiments(Watch):
    """The experiments pipeline: ``tick`` is one pass (``Progress.step``)."""

    def __init__(self, ctx: Submits, interval: float = INTERVAL_SECONDS) -> None:
        self.ctx = ctx
        self.progress = experiments.Progress()
        super().__init__("gpupool-experiments", "the experiments", interval, True, MIN_REST_SECONDS)

    def tick(self) -> int:
        changed = self.progress.step(self.ctx)
        if self.progress.again:  # a costly sampler's asks, spread over passes
            self.wake()
        return changed

    def jobs_changed(self) -> None:
        """Attempts started or ended, or metric points were kept: look again if an
        experiment is active (with none, every job's end would cost a pass for nothing;
        one made or resumed wakes the pipeline itself)."""
        if self.progress.active:
            self.wake()

    def awaits_points(self) -> bool:
        """Whether an experiment is active: metric ingest then reads its trials' points
        sooner, for the verdicts that wait on them."""
        return self.progress.active
