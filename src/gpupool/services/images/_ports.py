"""What the images' services need of the running server beyond ``core.Writes``: the
settings (the registries a site allows, the image store and its limits).

It lives with the images (not in ``services.core``): only pulling, importing and removing
images need it.
"""

from __future__ import annotations

from typing import Protocol

from gpupool.services.core import Writes
from gpupool.settings import Settings


class Stores(Writes, Protocol):
    """What pulling, importing and removing an image need: the settings (the allowed
    registries, the image store and its limits), the database and the clock."""

    @property
    def settings(self) -> Settings: ...
