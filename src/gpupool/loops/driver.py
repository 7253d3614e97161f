"""The control thread: runs the control pipelines in order, pass after pass.

Each pass: the launch failures a failed commit left, reconcile, stops, checkpoints, and — when
an attempt changed, the driver was woken, or ``schedule_interval`` passed — a scheduling cycle
(which launches and preempts as it goes). Then it sleeps until woken, an attempt changes (the
executor's ``change_fd``), or a tick, and a wake-up from that sleep is acted on at once: a
lone submit starts without waiting, and so do attempts that changed while a pass ran (a job
ended: its GPUs wait for the next pass, which then serves every end that came meanwhile).
Only a stream of submits that came while a pass ran waits first, a few times as long as the
pass took, so that the API keeps its share of the CPU and of the database's write lock, and
one pass then serves the whole burst.
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
from typing import Protocol

from gpupool.errors import StorageFull
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
FULL_DISK_LOG_SECONDS = 60.0


class Changes(Protocol):
    """What the driver needs of the executor: a descriptor that becomes readable when an
    attempt may have changed, and a way to take what it said (``Executor.change_fd``)."""

    def change_fd(self) -> int | None: ...

    def clear_changes(self) -> None: ...


class Driver:
    """Runs in one background thread of the server; ``wake`` makes it act at once."""

    def __init__(
        self,
        changes: Changes,
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
        self.changes, self.actives = changes, actives
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
        # told after a pass in which attempts started or ended (the notebooks' routes)
        self.on_changed: list[Callable[[], None]] = []
        # run before each scheduling cycle, in order (the jobs that wait for others settled)
        self.before_schedule: list[Callable[[], object]] = []

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
        if changed:
            for listener in self.on_changed:  # after the commit: they read what it recorded
                listener()
        self.stops.run()
        self.checkpoints.run()
        overdue = self.monotonic() - self._last_schedule > self.schedule_interval
        if changed or force_schedule or overdue:
            self._last_schedule = self.monotonic()
            for step in self.before_schedule:
                step()
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
            rest = self.rest_after(self.monotonic() - began, ended_work)
            if rest > 0:
                self._stopping.wait(rest)
            tick = BUSY_POLL if len(self.actives) else self.schedule_interval
            woken = self._wait(tick)

    def _say_storage_full(self) -> None:
        now = self.monotonic()
        if now - self._full_said_at >= FULL_DISK_LOG_SECONDS:
            self._full_said_at = now
            log.warning("the disk is full: nothing can be recorded; retrying until there is room")

    def rest_after(self, took: float, ended_work: bool) -> float:
        """How long to wait before the next pass, after one that took ``took`` seconds:
        nothing when no submit came while it ran (attempts that changed meanwhile, jobs
        that ended and left GPUs idle, are served at once: a rest there measured 6 ms more
        of idle GPU per job in a drain); when submits came (a stream), a few times as long
        as it took, so that the API keeps its share and one pass serves them all; as long
        only when that pass had also seen work end (GPUs idle)."""
        if not self._woken_meanwhile():
            return 0.0
        factor = SUBMIT_REST_FACTOR if not ended_work else 1
        return min(factor * took, MAX_REST)

    def _woken_meanwhile(self) -> bool:
        """Whether a wake (a submit) came since the last wait, left for the next to take."""
        ready, _, _ = io_select.select([self._wake_r], [], [], 0)
        return bool(ready)

    def _wait(self, timeout: float) -> bool:
        """Sleep until woken, an attempt changes, or the timeout; True if woken."""
        changes = self.changes.change_fd()
        fds = [self._wake_r] if changes is None else [self._wake_r, changes]
        ready, _, _ = io_select.select(fds, [], [], timeout)
        if changes in ready:
            self.changes.clear_changes()
        if self._wake_r not in ready:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        return True
