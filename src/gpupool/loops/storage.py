"""Storage: the teams' files summed against their quotas, and the disk's free space watched.

Every second the data directory's free space is looked at (a statvfs); every
``storage_scan_seconds``, or at once when the disk runs low (the database's reserve given
back first), a scan. Load: each team's files (``services.scheduling.load_team_files``), in
a read transaction. Slow work: walking them (``StorageScan``), with no transaction open.
Apply: each team's usage recorded and the running jobs of the teams over their quota (or,
the disk low, of the team filling it) stopped, in one transaction (``record_usage``); the
stops pipeline is then told, and sends them.

Every ``dataset_gc_seconds`` it also sweeps the dataset store: the blobs no version
references any more are removed (``services.datasets.collect_blobs``; a line in the log
says what it freed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpupool.loops.watch import Watch
from gpupool.scheduler.types import Clock
from gpupool.services import datasets
from gpupool.services.core import Reserve
from gpupool.services.scheduling import (
    NodesFiles,
    StorageScan,
    TeamUsage,
    load_team_files,
    record_usage,
)
from gpupool.settings import Settings
from gpupool.store.db import Database

log = logging.getLogger(__name__)

DISK_CHECK_SECONDS = 1.0  # the disk's free space is looked at this often (a statvfs)


class Storage(Watch):
    """Looks at the disk's free space every second and sums the teams' files every
    ``storage_scan_seconds`` (at once when the disk runs low); stops the running jobs of
    teams over their quota. ``on_stops``: told when stops were recorded (the control loop
    sends them). ``nodes``: on a pool, what the nodes hold (their agents walk their disks)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        clock: Clock,
        on_stops: Callable[[], None],
        nodes: NodesFiles | None = None,
    ) -> None:
        self.db, self.clock, self.on_stops = db, clock, on_stops
        self.settings = settings  # and db, clock: what the dataset store's sweep needs
        self.gc_seconds = settings.dataset_gc_seconds
        self._next_gc = time.monotonic() + min(60.0, self.gc_seconds)  # not as the server starts
        self.scan_seconds = settings.storage_scan_seconds
        self.files = StorageScan(settings, nodes)
        self.reserve = Reserve(
            settings.data_dir, settings.disk_reserve_bytes, settings.disk_low_bytes
        )
        self._next_scan = 0.0
        interval = min(DISK_CHECK_SECONDS, self.scan_seconds)
        super().__init__("gpupool-storage", "the teams' storage", interval, look_first=True)

    def start(self) -> None:
        self.reserve.keep()
        super().start()

    def tick(self) -> list[TeamUsage] | None:
        """One look: the scan when it is due, or at once when the disk runs low."""
        low = self.reserve.low()
        released = low and self.reserve.release()
        if not (released or time.monotonic() >= self._next_scan):
            return None
        self._next_scan = time.monotonic() + self.scan_seconds
        if time.monotonic() >= self._next_gc:
            self._next_gc = time.monotonic() + self.gc_seconds
            try:  # before the scan: what it frees counts at once
                datasets.collect_blobs(self)
            except Exception:  # the teams' scan goes on all the same
                log.exception("the dataset store's sweep failed")
        found = self.scan(low)
        if not low:
            self.reserve.keep()
        return found

    def scan(self, disk_low: bool = False) -> list[TeamUsage]:
        """Sum every team's files, record them, and stop the running jobs of the teams over
        their quota (``disk_low``: of the team using the most space, if none is over)."""
        with self.db.reader() as session:
            teams = load_team_files(session)
        found = self.files.measure(teams)
        low_mark = self.reserve.limits()[1] if disk_low else None
        with self.db.session() as session:
            stopped = record_usage(session, found, self.clock.now(), low_mark, self.reserve.free())
        # also when none was recorded now: an attempt launched since a stop was recorded for
        # it may not have been sent its stop yet
        if stopped or disk_low or any(usage.over for usage in found):
            self.on_stops()
        return found
