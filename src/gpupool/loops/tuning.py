"""The tuning watch: runs the queued tunings of the scheduler's settings one at a time, queues
the nightly autotune when it is due, and judges each adopted tuning a week later
(``services.tuning``'s rules). A tuning's search runs in a process of its own, spawned and
niced, which spawns its replays' processes: the server's threads keep the interpreter, and
the control loop its CPU share."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from gpupool.loops.watch import Watch
from gpupool.services import tuning
from gpupool.services.core import Submits

log = logging.getLogger(__name__)

NICENESS = 10  # a tuning's processes yield the CPU to the server's


def in_a_process(call: Callable[[], Any]) -> Any:
    """``call`` in a spawned, niced process of its own; what it returned."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_nice) as pool:
        return pool.submit(call).result()


def _nice() -> None:
    os.nice(NICENESS)


class Tuning(Watch):
    """Every ``tuning_scan_seconds`` (or when woken by a request): the nightly autotune if
    due, the adopted tunings' week checked, then the queued tunings run, oldest first."""

    def __init__(self, ctx: Submits, execute: tuning.Execute = in_a_process) -> None:
        self.ctx, self.execute = ctx, execute
        super().__init__(
            "gpupool-tuning", "the scheduler's tunings", ctx.settings.tuning_scan_seconds
        )

    def start(self) -> None:
        left = tuning.interrupted(self.ctx)
        if left:
            log.warning("%d tuning(s) were running when the server stopped: marked failed", left)
        super().start()

    def tick(self) -> list[int]:
        now = self.ctx.clock.now()
        if tuning.autotune_due(self.ctx, now):
            log.info("nightly autotune queued: tuning %d", tuning.queue_autotune(self.ctx, now))
        for tune_id in tuning.check_adoptions(self.ctx, now):
            log.info("tuning %d: its adopted settings judged after a week", tune_id)
        ran = []
        while (tune_id := tuning.next_queued(self.ctx)) is not None:
            shown = tuning.run(self.ctx, tune_id, self.execute)
            log.info("tuning %d: %s, %s", tune_id, shown.status, shown.message)
            ran.append(tune_id)
        return ran
