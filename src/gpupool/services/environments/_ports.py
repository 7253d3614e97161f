"""What the environments' services need of the running server beyond ``core.Writes``: the
settings (the site's package index, where environments live, the resolve's time limit).

It lives with the environments (not in ``services.core``) because only they need it."""

from __future__ import annotations

from typing import Protocol

from gpupool.services.core import Writes
from gpupool.settings import Settings


class Resolves(Writes, Protocol):
    """What making an environment needs: the database and the clock to record it, and the
    settings to resolve it (``create``)."""

    @property
    def settings(self) -> Settings: ...
