"""Replay metrics and their bounds, on hand-computed examples; the report that shows them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.sim.engine import JobRecord, SimResult, UnscheduledJob
from gpupool.sim.metrics import (
    compute_metrics,
    jain_index,
    offered_load,
    percentile,
    slowdown,
    srpt_avg_jct,
    summarize,
    team_metrics,
    team_slowdowns,
)
from gpupool.sim.report import duration, render, span


def record(
    job_id: int, submit: float, start: float, run: float, gpus: float = 1, team: str = "a"
) -> JobRecord:
    return JobRecord(job_id, team, submit, run, start, start + run, gpus, "node-000", ())


# Four GPUs. JCTs 10, 20, 30, 100; delays 0, 10, 10, 60; GPU-seconds 10 + 20 + 20 + 80 = 130.
RECORDS = (
    record(1, submit=0, start=0, run=10, gpus=1, team="a"),
    record(2, submit=0, start=10, run=10, gpus=2, team="a"),
    record(3, submit=10, start=20, run=20, gpus=1, team="b"),
    record(4, submit=20, start=80, run=40, gpus=2, team="b"),
)


def test_completion_times_and_delays():
    metrics = compute_metrics(RECORDS, total_gpus=4)
    assert metrics.jobs == 4
    assert metrics.avg_jct == pytest.approx(40)
    assert metrics.median_jct == pytest.approx(25)
    assert metrics.p95_jct == pytest.approx(30 + 0.85 * 70)  # rank 2.85 between 30 and 100
    assert metrics.avg_queueing_delay == pytest.approx(20)
    assert metrics.p95_queueing_delay == pytest.approx(10 + 0.85 * 50)


def test_utilisation_over_the_makespan():
    metrics = compute_metrics(RECORDS, total_gpus=4)
    assert metrics.makespan == 120  # first submit 0, last end 120
    assert metrics.utilisation == pytest.approx(130 / (4 * 120))


def test_bounds():
    bounds = compute_metrics(RECORDS, total_gpus=4).bounds
    assert bounds.min_avg_jct == pytest.approx(80 / 4)  # mean duration
    # No job ends before submit + duration: the latest is job 4 at 20 + 40 = 60.
    assert bounds.offered_load == pytest.approx(130 / (4 * 60))
    assert bounds.max_utilisation == pytest.approx(130 / 240)
    assert offered_load(RECORDS, total_gpus=1) == pytest.approx(130 / 60)
    assert compute_metrics(RECORDS, total_gpus=1).bounds.max_utilisation == 1.0


def test_fairness_over_team_slowdowns():
    # Slowdowns: a 1 and 2 (mean 1.5); b 1.5 and 2.5 (mean 2).
    assert team_slowdowns(RECORDS) == {"a": 1.5, "b": 2.0}
    metrics = compute_metrics(RECORDS, total_gpus=4)
    assert metrics.jain_fairness == pytest.approx(3.5**2 / (2 * (1.5**2 + 2.0**2)))
    assert (metrics.worst_team, metrics.worst_team_slowdown) == ("b", 2.0)


def test_jain_index():
    assert jain_index([2.0, 2.0, 2.0]) == 1.0
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([]) == 1.0


def test_slowdown_counts_short_jobs_as_one_second():
    assert slowdown(record(1, submit=0, start=3, run=0.5)) == pytest.approx(3.5)
    assert slowdown(record(1, submit=0, start=0, run=0)) == 1.0


def test_worst_team_ties_go_to_the_first_name():
    records = (record(1, 0, 0, 5, team="b"), record(2, 0, 0, 5, team="a"))
    assert compute_metrics(records, total_gpus=2).worst_team == "a"


def test_percentile_interpolates_linearly():
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    assert percentile([], 95) == 0.0


def test_no_jobs_give_zeros():
    metrics = compute_metrics((), total_gpus=4, unscheduled=2)
    assert (metrics.jobs, metrics.unscheduled, metrics.avg_jct, metrics.utilisation) == (
        0,
        2,
        0.0,
        0.0,
    )
    assert metrics.jain_fairness == 1.0


def test_summarize_reads_a_result():
    missing = UnscheduledJob(9, "c", 5.0, 10.0, 8.0, "needs 8 GPUs on one node")
    result = SimResult(RECORDS, (missing,), total_gpus=4, cycles=5)
    metrics = summarize(result)
    assert (metrics.unscheduled, metrics.preemptions, metrics.preemptions_per_job) == (1, 0, 0.0)
    assert metrics == compute_metrics(RECORDS, 4, unscheduled=1)


# -- report ------------------------------------------------------------------------------------


def test_durations_read_in_hours_when_large():
    assert duration(42) == "42 s"
    assert duration(750) == "12.5 min"
    assert duration(3.83 * 3600) == "3.83 h"
    assert duration(221.5 * 3600) == "221.50 h"
    assert span(49.5 * 86400) == "49.5 d"
    assert span(3600) == "1.00 h"


def test_the_report_has_a_row_per_policy_and_one_bounds_line():
    metrics = compute_metrics(RECORDS, total_gpus=4)
    text = render([("default", metrics), ("other", metrics)])
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["POLICY", "JOBS", "UNSCHEDULED", "AVG"]
    assert lines[1].split()[:4] == ["default", "4", "0", "40"]
    # SRPT at 4 GPU-seconds per second: JCTs 2.5, 7.5, 5 and 20 s
    assert lines[2].startswith("other")
    assert lines[3] == (
        "bounds: avg JCT >= 20 s (mean isolated runtime), >= 9 s (SRPT of the GPU-seconds on "
        "one server as fast as the cluster); utilisation <= 54.2 % (offered load 54.2 %)"
    )


def test_the_report_gives_bounds_per_policy_when_they_ran_different_jobs():
    text = render([("one", compute_metrics(RECORDS, 4)), ("two", compute_metrics(RECORDS[:2], 4))])
    assert "bounds (one): avg JCT >= 20 s" in text
    assert "bounds (two): avg JCT >= 10 s" in text


def test_team_metrics_give_a_row_per_team():
    result = SimResult(
        (*RECORDS[:3], replace(RECORDS[3], preemptions=2)),
        (UnscheduledJob(9, "c", 0, 5, 64, "too big"),),
        total_gpus=4,
        cycles=0,
    )
    a, b, c = team_metrics(result, {"a": 2, "b": 1})
    # makespan 120 s; a used 30 GPU-seconds, b 100
    assert (a.team, a.guarantee, a.jobs, a.unscheduled) == ("a", 2, 2, 0)
    assert a.avg_jct == pytest.approx(15)
    assert a.used_of_guarantee == pytest.approx(30 / (2 * 120))
    assert b.used_of_guarantee == pytest.approx(100 / 120)
    assert b.used_of_pool == pytest.approx(100 / (4 * 120))
    assert b.p95_queueing_delay == pytest.approx(10 + 0.95 * 50)
    assert (b.preemptions, a.preemptions) == (2, 0)
    assert (c.jobs, c.unscheduled, c.used_of_guarantee, c.avg_jct) == (0, 1, None, 0.0)


def test_the_srpt_bound_serves_the_least_work_first_on_one_fast_server():
    jobs = [record(1, submit=0, start=0, run=4), record(2, submit=1, start=4, run=1)]
    # one GPU: job 2 (1 s of work) overtakes job 1 (3 s left) at 1 and ends at 2, job 1 at 5
    assert srpt_avg_jct(jobs, 1) == pytest.approx((1 + 5) / 2)
    # two GPUs' speed: job 1 has 2 GPU-s left at 1; job 2 ends at 1.5, job 1 at 2.5
    assert srpt_avg_jct(jobs, 2) == pytest.approx((0.5 + 2.5) / 2)
    assert srpt_avg_jct([], 2) == 0.0
    assert compute_metrics(jobs, total_gpus=1).bounds.srpt_avg_jct == pytest.approx(3)
