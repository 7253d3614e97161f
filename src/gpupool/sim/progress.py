"""How far a replay has gone, shown on a terminal: a Rich bar on stderr, only when stderr is
a terminal (piped or redirected, nothing extra is written).

Progress is counted in job events a replay goes through anyway: each job's arrival and its
first start (a job that never starts leaves its half uncounted). After the last start only
completions are left, which cost the replay little, so the bar follows where the time goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from gpupool.scheduler.types import Allocation, PendingJob
    from gpupool.sim.engine import Probe
    from gpupool.sim.traces import TraceJob


class ProgressDisplay(AbstractContextManager["ProgressDisplay"]):
    """A transient progress display on stderr while it is open, when stderr is a terminal.

    ``watch(label, jobs, probe)`` returns the probe to give the engine: ``probe`` itself when
    nothing is shown, else a :class:`Watched` probe that passes every event on to it.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bars: Progress | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.console.is_terminal:
            columns = (
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
            )
            self.bars = Progress(*columns, console=self.console, transient=True)
            self.bars.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.bars is not None:
            self.bars.stop()
            self.bars = None

    def watch(self, label: str, jobs: int, probe: Probe) -> Probe:
        if self.bars is None:
            return probe
        bars = self.bars
        task = bars.add_task(label, total=2 * jobs)
        return Watched(probe, lambda count: bars.advance(task, count))


class Watched:
    """A probe that counts arrivals and first starts, then hands each event to ``inner``."""

    def __init__(self, inner: Probe, advance: Callable[[int], None]) -> None:
        self.inner = inner
        self.advance = advance
        self.started_jobs: set[int] = set()

    def started(self, allocations: Sequence[Allocation]) -> None:
        self.inner.started(allocations)
        first = {a.job_id for a in allocations} - self.started_jobs
        if first:
            self.started_jobs |= first
            self.advance(len(first))

    def stopped(self, allocations: Sequence[Allocation]) -> None:
        self.inner.stopped(allocations)

    def arrived(self, jobs: Sequence[TraceJob], pending: Mapping[int, PendingJob]) -> None:
        self.inner.arrived(jobs, pending)
        self.advance(len(jobs))
