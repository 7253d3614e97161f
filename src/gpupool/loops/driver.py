"""The control thread: runs the control pipelines in order, pass after pass.

Each pass: the launch failures a failed commit left, reconcile, stops, checkpoints, and — when
an attempt changed, the driver was woken, or ``schedule_interval`` passed — a scheduling cycle
(which launches and preempts as it goes). Between passes it rests a few times as long as the
pass took (so that under a stream of submits one pass serves many and the API keeps the CPU
and the database's write lock), then sleeps until woken, an attempt changes (the executor's
``change_fd``), or a tick; a wake-up lets a burst of submits gather for ``BATCH_WINDOW``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select as io_select
import threading
import time
from collections.abc import Callable

from gpupool.errors import StorageFull
from gpupool.executors.base import Executor
from gpupool.loops.active import ActiveAttempts
from gpupool.loops.checkpoints import Checkpoints
from gpupool.loops.launch import Launch
from gpupool.loops.readopt import Readopt
from gpupool.loops.reconcile import Reconcile
from gpupool.loops.schedule import Scheduling
from gpupool.loops.stops import Stops
from gpupool.services.core import LoopStats

log = logging.getLogger(__name__)

# Runners announce every state change through the executor's change_fd, so polling is only
# a safety net (a runner killed with SIGKILL announces nothing).
BUSY_POLL = 0.25
MAX_REST = 0.25
SUBMIT_REST_FACTOR = 5
BATCH_WINDOW = 0.01
FULL_DISK_LOG_SECONDS = 60.0


class Driver:
    """Runs in one background thread of the server; ``wake`` makes it act at once."""

    def __init__(
        self,
        executor: Executor,
        actives: ActiveAttempts,
        readopt: Readopt,
        reconcile: Reconcile,
        stops: Stops,
        checkpoints: Checkpoints,
        launch: Launch,
        scheduling: Scheduling,
        stats: LoopStats,
        schedule_interval: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.executor, self.actives = executor, actives
        self.readopt, self.reconcile, self.stops = readopt, reconcile, stops
        self.checkpoints, self.launch, self.scheduling = checkpoints, launch, scheduling
        self.stats, self.schedule_interval = stats, schedule_interval
        self.monotonic = monotonic
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_schedule = 0.0
        self._full_said_at = -math.inf

    def start(self) -> None:
        self.readopt.run()
        self._thread = threading.Thread(target=self._run, name="gpupool-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the loop; running attempts are left to run (a restart re-adopts them)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.wake()
        if self._thread:
            self._thread.join(timeout=10)
        wake_r, wake_w, self._wake_r, self._wake_w = self._wake_r, self._wake_w, -1, -1
        os.close(wake_r)
        os.close(wake_w)

    def wake(self) -> None:
        """Make the loop schedule at once (after a submit, a cancel, a node change)."""
        if self._wake_w < 0:  # stopped: never write into a number the OS may have reused
            return
        with contextlib.suppress(OSError):  # full: a wake is pending anyway
            os.write(self._wake_w, b"!")

    def run_once(self, force_schedule: bool = True) -> bool:
        """One pass; True if some attempt changed state.

        Every pipeline marks what it observed only once its transaction committed, so a pass
        that fails (a full disk) is simply done again by the next one."""
        self.launch.record_failures()
        changed = self.reconcile.run()
        self.stops.run()
        self.checkpoints.run()
        overdue = self.monotonic() - self._last_schedule > self.schedule_interval
        if changed or force_schedule or overdue:
            self._last_schedule = self.monotonic()
            self.scheduling.run()
            self.stats.cycle(self.monotonic() - self._last_schedule)
        return changed

    def _run(self) -> None:
        woken = True
        while not self._stopping.is_set():
            began = self.monotonic()
            ended_work = False
            try:
                ended_work = self.run_once(force_schedule=woken)
            except StorageFull:  # nothing was recorded: the next pass does it all again
                self._say_storage_full()
            except Exception:  # the loop must outlive any one bad pass
                log.exception("control loop pass failed")
            # When work just ended, GPUs are idle: rest only as long as the pass took.
            factor = 1 if ended_work else SUBMIT_REST_FACTOR
            self._stopping.wait(min(factor * (self.monotonic() - began), MAX_REST))
            tick = BUSY_POLL if len(self.actives) else self.schedule_interval
            woken = self._wait(tick)
            if woken:  # submits come in bursts: let a burst gather into one pass
                self._stopping.wait(BATCH_WINDOW)

    def _say_storage_full(self) -> None:
        now = self.monotonic()
        if now - self._full_said_at >= FULL_DISK_LOG_SECONDS:
            self._full_said_at = now
            log.warning("the disk is full: nothing can be recorded; retrying until there is room")

    def _wait(self, timeout: float) -> bool:
        """Sleep until woken, an attempt changes, or the timeout; True if woken."""
        changes = self.executor.change_fd()
        fds = [self._wake_r] if changes is None else [self._wake_r, changes]
        ready, _, _ = io_select.select(fds, [], [], timeout)
        if changes in ready:
            self.executor.clear_changes()
        if self._wake_r not in ready:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        return True
