"""What the model registry's services need of the running server beyond ``core.Writes``: the
settings (the model store and its limits) and the executor, which packs a job's outputs
where they are (``_models.pack``).

It lives with the models (not in ``services.core``) because only registering a version needs
it: the shared context stays free of any capability's needs.
"""

from __future__ import annotations

from typing import Protocol

from gpupool.executors.base import Executor
from gpupool.services.core import Writes
from gpupool.settings import Settings


class Packs(Protocol):
    """What packing a job's outputs into the model store needs: the settings (where the
    store is, and its limits) and the executor that reads the outputs (``pack``)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def executor(self) -> Executor: ...


class Registers(Packs, Writes, Protocol):
    """What registering a version needs: what ``Packs`` does, and the database and the clock
    to record it (``register``)."""
