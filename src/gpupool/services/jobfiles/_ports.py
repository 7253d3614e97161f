"""What applying a job file needs of the running server: what any submit needs
(``core.Submits``), the deployments' side, told of each deployment a file made, the
experiments pipeline, woken by each experiment a file made, and the executor (a Dataset
made from a job's outputs reads them where they are)."""

from __future__ import annotations

from typing import Protocol

from gpupool.executors.base import Executor
from gpupool.services.core import Submits
from gpupool.services.deployments import DeploymentSide
from gpupool.services.experiments import Wakes


class Applies(Submits, Protocol):
    @property
    def deployments(self) -> DeploymentSide: ...

    @property
    def executor(self) -> Executor: ...

    @property
    def experiments(self) -> Wakes: ...
