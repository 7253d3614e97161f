"""The report of a replay or a fill experiment as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from gpupool.sim.engine import cluster, simulate
from gpupool.sim.fragmentation import fill
from gpupool.sim.metrics import summarize
from gpupool.sim.policies import named
from gpupool.sim.report import fill_document, replay_document, to_json
from tests.support.traces import job

JOBS = [job(1, 0, 100, 4), job(2, 0, 100, 4), job(3, 10, 50, 2)]


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
