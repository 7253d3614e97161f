"""What the datasets' services need of the running server beyond ``core.Writes``: the
settings (where the dataset store is, and its limits) and, to make a version from a job's
outputs, the executor that reads them where they are.

It lives with the datasets (not in ``services.core``) because only they need it: the shared
context stays free of any capability's needs.
"""

from __future__ import annotations

from typing import Protocol

from gpupool.executors.base import Executor
from gpupool.services.core import Writes
from gpupool.settings import Settings


class Stores(Writes, Protocol):
    """What receiving blobs and recording versions needs: the database, the clock and the
    settings (the store's place and limits)."""

    @property
    def settings(self) -> Settings: ...


class Copies(Stores, Protocol):
    """What making a version from a job's outputs needs: what ``Stores`` does, and the
    executor that packs the outputs on the node that holds them."""

    @property
    def executor(self) -> Executor: ...
