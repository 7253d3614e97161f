"""A look every interval in a daemon thread of its own, until stopped.

The pipelines that run beside the control thread (the Ray pool's node and head watches,
metric ingest, the notebooks' idleness, rollouts, storage) each run in one: a ``tick`` that
may fail (logged, and the watch goes on), a rest between looks, a ``wake`` that ends the
rest early, and a ``stop`` that ends the watch and waits for its thread. The rules each
look applies are the services'; only the thread is here.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 10.0


class Watch:
    """A look every ``interval`` seconds in a daemon thread of its own, until stopped; a look
    that fails is logged and the watch goes on. ``look_first``: the first look at start.
    Subclasses give ``tick``; ``rest`` may make the rest depend on how long the look took."""

    def __init__(
        self,
        name: str,
        what: str,
        interval: float,
        look_first: bool = False,
        min_rest: float = 0.0,
    ) -> None:
        """``min_rest``: the least time between two looks, however often it is woken."""
        self.name, self.what, self.interval, self.look_first = name, what, interval, look_first
        self.min_rest = min_rest
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> object:
        raise NotImplementedError

    def rest(self, took: float) -> float:
        """How long to rest after a look that took ``took`` seconds."""
        return self.interval

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Look again now, without waiting for the rest to end."""
        self._woken.set()

    def stop(self) -> None:
        self._stopping.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)

    def _run(self) -> None:
        if not self.look_first:
            self._pause(self.interval)
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                self.tick()
            except Exception:  # the watch must outlive any one bad look
                log.exception("watching %s failed", self.what)
            self._pause(self.rest(time.monotonic() - began))

    def _pause(self, seconds: float) -> None:
        if self.min_rest > 0 and self._stopping.wait(min(self.min_rest, seconds)):
            return
        self._woken.wait(max(0.0, seconds - self.min_rest))
        self._woken.clear()
