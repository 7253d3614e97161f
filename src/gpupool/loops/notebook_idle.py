"""Notebook idle: gives back the GPUs of notebooks nobody uses.

Every ``min(60 s, idle time / 4)``, beside the control thread. Load: the notebooks whose job
ended are recorded as stopped (``services.notebooks.settle``), then the running notebooks
that hold GPUs are read (``looks``). Slow work: each JupyterLab is asked for its kernels,
with no transaction open (silence concludes nothing: still starting, or gone); each
answering notebook is judged by its kernels and GPU samples (``judge_idleness``). Apply: in
one transaction, what was seen is recorded and the notebooks idle for
``notebook_idle_seconds`` stopped, each guarded by its job id (``record_idleness``); the
control loop is woken when GPUs were given back, and the notebooks' routes withdrawn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx

from gpupool.domain.notebooks import Kernel
from gpupool.executors.base import Executor
from gpupool.loops.watch import Watch
from gpupool.proxy import PLAIN_HTTP, client_via
from gpupool.scheduler.types import Clock
from gpupool.services import notebooks
from gpupool.store.db import Database

log = logging.getLogger(__name__)

ASK_TIMEOUT = httpx.Timeout(5.0)


class NotebookIdle(Watch):
    """A look every ``min(60 s, idle time / 4)`` in a daemon thread of its own, until
    stopped; a failed look is logged and the watch goes on."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        clock: Clock,
        wake: Callable[[], None],
        idle_seconds: float,
        stopped: Callable[[], None] = lambda: None,
        client: httpx.Client | None = None,
    ) -> None:
        """``wake``: tells the control loop to schedule now (GPUs were given back);
        ``stopped``: tells the notebooks' routes that some were stopped (their routes go)."""
        self.db, self.executor, self.clock, self.wake_loop = db, executor, clock, wake
        self.stopped = stopped
        self.idle_seconds = idle_seconds
        self.client = client or httpx.Client(
            timeout=ASK_TIMEOUT, trust_env=False, verify=PLAIN_HTTP
        )
        interval = notebooks.idle_interval(idle_seconds)
        super().__init__("gpupool-idle", "the notebooks' idleness", interval)

    def stop(self) -> None:
        super().stop()
        self.client.close()

    def tick(self) -> int:
        """One look at every running notebook; how many were stopped for idling."""
        with self.db.session() as session:
            notebooks.settle(session, self.clock.now())
        with self.db.reader() as session:
            looks = notebooks.looks(session, self.executor)
        kernels = {look.notebook_id: self.kernels(look) for look in looks}
        answered = [look for look in looks if kernels[look.notebook_id] is not None]
        with self.db.reader() as session:
            seen = notebooks.judge_idleness(
                session, answered, kernels, self.clock.now(), self.idle_seconds
            )
        with self.db.session() as session:
            stopped = notebooks.record_idleness(session, seen, self.clock.now(), self.idle_seconds)
        if stopped:
            self.stopped()
            self.wake_loop()
        return stopped

    def kernels(self, look: notebooks.Look) -> list[Kernel] | None:
        """The notebook's kernels, or None when its JupyterLab does not answer (still
        starting, or gone: nothing is concluded from silence)."""
        headers = {"Authorization": f"token {look.token}"}
        try:
            if look.via is None:
                answer = self.client.get(look.url, headers=headers)
            else:  # a network of its own: through its runner's socket
                with client_via(look.via, ASK_TIMEOUT) as client:
                    answer = client.get(look.url, headers=headers)
            answer.raise_for_status()
            return notebooks.kernels_of(answer.json())
        except (httpx.HTTPError, OSError, ValueError, TypeError, KeyError) as error:
            log.info("notebook %d: no answer from its JupyterLab (%s)", look.notebook_id, error)
            return None
