"""Notebook routes: the proxy's table kept up with the notebooks that serve.

A pass publishes the route of every notebook whose job runs and whose JupyterLab's endpoint
is known (``services.notebooks.NotebookRoutes``: one read, no transaction held), replacing
the notebooks' routes whole. The control thread wakes it after every pass in which an
attempt started or ended, so that a notebook is reachable as soon as its job runs and out
of reach once it ended; it also looks every ``INTERVAL_S`` (a change it missed: a server
started with notebooks running). A stop by a user withdraws the route itself, at once.
"""

from __future__ import annotations

from gpupool.loops.watch import Watch
from gpupool.services.notebooks import NotebookRoutes as Publisher

INTERVAL_S = 5.0
MIN_REST_S = 0.05  # between passes, however often it is woken (a drain ends jobs fast)


class NotebookRoutes(Watch):
    """Started and stopped with the platform; ``wake`` it when attempts changed."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        super().__init__(
            "gpupool-notebook-routes",
            "the notebooks' routes",
            INTERVAL_S,
            look_first=True,
            min_rest=MIN_REST_S,
        )

    def tick(self) -> None:
        self.publisher.publish()
