"""What applying a job file needs of the running server: what any submit needs
(``core.Submits``) and the deployments' side, told of each deployment a file made."""

from __future__ import annotations

from typing import Protocol

from gpupool.services.core import Submits
from gpupool.services.deployments import DeploymentSide


class Applies(Submits, Protocol):
    @property
    def deployments(self) -> DeploymentSide: ...
