"""What the experiments' calls need of the running server beyond ``core.Submits``: the
experiments pipeline, to wake it when one is made, resumed or stopped."""

from __future__ import annotations

from typing import Protocol

from gpupool.services.core import Submits


class Wakes(Protocol):
    """The experiments pipeline (``gpupool.loops.experiments.Experiments``)."""

    def wake(self) -> None:
        """Look at the experiments now: one was made, resumed or stopped."""
        ...


class Runs(Submits, Protocol):
    """What making and steering experiments needs: what a submit does, and the pipeline."""

    @property
    def experiments(self) -> Wakes: ...
