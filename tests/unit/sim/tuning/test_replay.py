"""A window's replay and its scores (censored jobs), and the fidelity of a replay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.sim.engine import cluster
from gpupool.sim.traces import Trace
from gpupool.sim.tuning import FIDELITY_LIMIT, fidelity
from gpupool.sim.tuning._replay import (
    ReplayTask,
    Setup,
    replay,
    score,
    service_before,
    window_jobs,
)
from tests.support.traces import job

ONE_GPU = Setup(cluster("1x1"), (), "count", 0.0)


def test_a_censored_job_holds_its_gpus_but_is_not_scored():
    # job 1 was still running at export after 100 s: it is replayed for those 100 s, so
    # job 2 waits for it, but its own JCT (a lower bound) is no score's
    jobs = (job(1, 0, 100, 1, censored=True), job(2, 10, 50, 1))
    result = replay(ReplayTask(jobs, DEFAULT_POLICY, ONE_GPU))
    assert {r.job_id: (r.start, r.end) for r in result.records} == {1: (0, 100), 2: (100, 150)}
    scores = score(result, jobs)
    assert (scores.jobs, scores.avg_jct, scores.avg_wait) == (1, 140.0, 90.0)


def test_a_window_is_the_jobs_submitted_in_it():
    jobs = tuple(job(n, 10.0 * n, 5, 1) for n in range(1, 6))
    assert [j.job_id for j in window_jobs(jobs, 20.0, 40.0)] == [2, 3]
    assert window_jobs(Trace("t", jobs), 100.0, 200.0) == ()


def test_the_service_seen_before_a_window_is_of_the_jobs_ended_and_not_censored():
    jobs = (job(1, 0, 10, 2), job(2, 0, 10, 1, censored=True), job(3, 5, 100, 1))
    assert service_before(jobs, 50.0) == (20.0,)  # job 3 had not ended


@pytest.fixture(scope="module")
def seen() -> tuple:
    """Three jobs that meet on one GPU, with their replayed JCTs as the observed ones."""
    jobs = (job(1, 0, 100, 1), job(2, 10, 30, 1), job(3, 20, 30, 1), job(4, 30, 5, 1))
    records = replay(ReplayTask(jobs, DEFAULT_POLICY, ONE_GPU)).records
    jct = {record.job_id: record.jct for record in records}
    return tuple(replace(j, observed_jct=jct[j.job_id]) for j in jobs)


def test_a_replay_of_its_own_output_has_no_error(seen):
    found = fidelity(seen, cluster("1x1"), DEFAULT_POLICY, placement="count", restart_cost=0)
    assert (found.jobs, found.median_error, found.p90_error) == (4, 0.0, 0.0)
    assert found.trusted and found.limit == FIDELITY_LIMIT


def test_a_perturbed_history_shows_each_jobs_error(seen):
    # jobs 1 and 3 took twice as long as replayed, jobs 2 and 4 a tenth longer
    perturbed = [
        replace(j, observed_jct=j.observed_jct * (2 if j.job_id % 2 else 1.1)) for j in seen
    ]
    found = fidelity(perturbed, cluster("1x1"), DEFAULT_POLICY, placement="count", restart_cost=0)
    assert found.median_error == pytest.approx((0.5 + 1 / 11) / 2)  # 50 % and 9.1 %
    assert [error.job_id for error in found.worst] == [1, 3, 2, 4]
    assert found.worst[0].error == pytest.approx(0.5) and found.worst[0].replayed > 0
    assert not found.trusted


def test_censored_jobs_and_jobs_never_seen_end_are_not_compared(seen):
    jobs = (replace(seen[0], censored=True), replace(seen[1], observed_jct=None), *seen[2:])
    found = fidelity(jobs, cluster("1x1"), DEFAULT_POLICY, placement="count", restart_cost=0)
    assert found.jobs == 2
    nothing = fidelity(jobs[:2], cluster("1x1"), DEFAULT_POLICY)
    assert (nothing.jobs, nothing.median_error, nothing.trusted) == (0, None, False)
