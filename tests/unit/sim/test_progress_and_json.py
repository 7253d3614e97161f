"""A replay's progress display (only on a terminal) and the report as JSON."""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace

from rich.console import Console
from tests.support.traces import job

from gpupool.sim.engine import cluster, simulate
from gpupool.sim.fragmentation import fill
from gpupool.sim.metrics import summarize
from gpupool.sim.policies import named
from gpupool.sim.progress import ProgressDisplay, Watched
from gpupool.sim.report import fill_document, replay_document, to_json

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


def test_replay_json_holds_every_row_unrounded_with_its_bounds() -> None:
    nodes = cluster("1x4")
    metrics = summarize(simulate(JOBS, nodes))
    rows = [("default", metrics, {}), ("odd", replace(metrics, avg_jct=math.inf), {"x": 2})]
    document = json.loads(to_json(replay_document({"placement": "node"}, rows)))
    first, second = document["rows"]
    assert first["policy"] == "default" and first["avg_jct"] == metrics.avg_jct
    assert first["bounds"]["min_avg_jct"] == metrics.bounds.min_avg_jct
    assert first["p95_jct"] == metrics.p95_jct, "not rounded as the table is"
    assert (second["avg_jct"], second["unscheduled_reasons"]) == (None, {"x": 2})
    assert document["placement"] == "node" and "teams" not in document


def test_fill_json_gives_samples_in_gpus_and_the_unallocated_share() -> None:
    nodes = cluster("1x4")
    report = fill(JOBS, nodes, named("best-fit"))
    (row,) = json.loads(to_json(fill_document({}, [("best-fit", report)])))["fill"]
    assert (row["tasks"], row["failed"], row["total_gpus"]) == (
        report.tasks,
        report.failed,
        4,
    )
    final = row["final"]
    assert final["unallocated_share"] == 1 - final["allocated_gpus"] / 4
