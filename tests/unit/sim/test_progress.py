"""A replay's progress display (only on a terminal) and the probe it watches through."""

from __future__ import annotations

import io

from rich.console import Console

from gpupool.sim.engine import cluster, simulate
from gpupool.sim.fragmentation import fill
from gpupool.sim.policies import named
from gpupool.sim.progress import ProgressDisplay, Watched
from tests.support.traces import job

JOBS = [job(1, 0, 100, 4), job(2, 0, 100, 4), job(3, 10, 50, 2)]


class Recorder:
    """A probe that writes down every event it is given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[int, ...]]] = []

    def started(self, allocations) -> None:  # noqa: ANN001
        self.events.append(("started", tuple(a.job_id for a in allocations)))

    def stopped(self, allocations) -> None:  # noqa: ANN001
        self.events.append(("stopped", tuple(a.job_id for a in allocations)))

    def arrived(self, jobs, pending) -> None:  # noqa: ANN001
        self.events.append(("arrived", tuple(j.job_id for j in jobs)))


def test_a_watched_replay_counts_arrivals_and_first_starts_and_passes_every_event_on() -> None:
    alone, inner, counted = Recorder(), Recorder(), []
    nodes = cluster("1x4")
    simulate(JOBS, nodes, probe=alone)
    simulate(JOBS, nodes, probe=Watched(inner, counted.append))
    assert inner.events == alone.events, "the replay's probe sees what it saw alone"
    assert sum(counted) == 2 * len(JOBS), "each job: its arrival and its first start"


def test_the_display_shows_nothing_off_a_terminal_and_a_bar_on_one() -> None:
    probe = Recorder()
    piped = io.StringIO()
    with ProgressDisplay(Console(file=piped)) as shown:
        assert shown.watch("replaying default", 3, probe) is probe
    assert piped.getvalue() == ""

    terminal = io.StringIO()
    with ProgressDisplay(Console(file=terminal, force_terminal=True, width=100)) as shown:
        watched = shown.watch("replaying default", len(JOBS), probe)
        simulate(JOBS, cluster("1x4"), probe=watched)
        (task,) = shown.bars.tasks
        assert (task.completed, task.total) == (6, 6)
    assert "replaying default" in terminal.getvalue()


def test_the_fill_experiment_reports_to_the_watching_probe() -> None:
    nodes = cluster("1x4")
    seen: list[int] = []

    def watch(probe, tasks: int):  # noqa: ANN001, ANN202
        seen.append(tasks)
        return Watched(probe, lambda count: None)

    report = fill(JOBS, nodes, named("fgd"), watch=watch)
    assert seen == [report.tasks]
    assert report == fill(JOBS, nodes, named("fgd")), "watching changes nothing"
