"""The bar of issue 3 on the real Philly subset the Tiresias authors used.

Team 11cb48, jobs submitted in October 2017 (6,134 jobs), 4 nodes x 4 GPUs. Tiresias' own
simulator gives avg JCT: FIFO 21.97 h, DLAS-GPU 3.83 h, SRTF-oracle 2.24 h. The replay is
deterministic, so these are exact figures of the policy, not timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.sim.engine import cluster, simulate
from gpupool.sim.metrics import Metrics, summarize
from gpupool.sim.policies import named
from gpupool.sim.traces import load_trace

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces"
SUBSET = "?teams=11cb48&start=2017-10-01&end=2017-11-01"
HOUR = 3600.0

pytestmark = pytest.mark.skipif(
    not (TRACES / "philly.csv").is_file(), reason=f"{TRACES} is absent: traces live beside the repo"
)


@pytest.fixture(scope="module")
def jobs():
    return load_trace(f"philly:{TRACES / 'philly.csv'}{SUBSET}").jobs


def replay(jobs, policy: str, restart_cost: float, placement: str = "count") -> Metrics:
    result = simulate(
        jobs, cluster("4x4"), restart_cost=restart_cost, placement=placement, settings=named(policy)
    )
    assert not result.unscheduled
    return summarize(result)


def test_the_srpt_bound_is_the_published_bound(jobs):
    # Tiresias gives 1.50 h as the bound: SRPT of the GPU work on one server as fast as the
    # cluster (the mean isolated runtime, 0.81 h, is the looser bound)
    bounds = replay(jobs, "fifo", 0.0).bounds
    assert bounds.srpt_avg_jct / HOUR == pytest.approx(1.50, abs=0.01)
    assert bounds.min_avg_jct / HOUR == pytest.approx(0.806, abs=0.001)


def test_fifo_reproduces_the_published_figure(jobs):
    assert replay(jobs, "fifo", 0.0).avg_jct / HOUR == pytest.approx(21.97, abs=0.05)


def test_the_default_beats_the_bar_with_and_without_restart_cost(jobs):
    assert replay(jobs, "default", 0.0).avg_jct < 3.0 * HOUR
    assert replay(jobs, "default", 60.0).avg_jct < 3.83 * HOUR


def test_the_default_beats_fifo_and_drf_on_every_figure_that_matters(jobs):
    default = replay(jobs, "default", 60.0, "node")
    for baseline in (replay(jobs, "fifo", 60.0, "node"), replay(jobs, "drf", 60.0, "node")):
        assert default.avg_jct < baseline.avg_jct
        assert default.p95_queueing_delay < baseline.p95_queueing_delay
        assert default.utilisation >= baseline.utilisation
        assert default.jain_fairness >= baseline.jain_fairness


def test_tiresias_reproduces_dlas_gpu(jobs):
    # Tiresias' simulator (run_sim.py --schedule=dlas-gpu --scheme=count) gives 3.83 h here;
    # ours 3.92 h: its fit-first walk sometimes preempts a larger job than ours picks
    assert replay(jobs, "tiresias", 0.0).avg_jct / HOUR == pytest.approx(3.83, rel=0.03)
