"""What the notebooks' services need of the running server beyond ``core.Tells``: the
publisher of their routes in the proxy's table (``_routes.NotebookRoutes``).

It lives with the notebooks (not in ``services.core``): the shared context stays free of any
capability's types."""

from __future__ import annotations

from typing import Protocol

from gpupool.services.core import Tells


class NotebookSide(Protocol):
    """The notebooks' routes, as their services see them."""

    def changed(self, notebook_id: int) -> None:
        """Publish notebook ``notebook_id``'s route now, or withdraw it (it was stopped)."""
        ...


class NotebookStops(Tells, Protocol):
    """The running server as a stop of a notebook sees it: the database, the clock, the
    control loop, and the notebooks' routes (withdrawn before the stop returns)."""

    @property
    def notebooks(self) -> NotebookSide: ...
