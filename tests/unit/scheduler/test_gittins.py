"""The Gittins index over the service seen, and ``order`` "gittins": LAS levels, each in
Gittins-index order (Tiresias' discretised 2D-Gittins)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.gittins import ServiceDistribution
from gpupool.scheduler.ledger import Ledger
from gpupool.scheduler.ordering import KeptOrder, Queues, leased_order
from gpupool.sim.engine import Replay, cluster, simulate
from tests.support.scheduling import pending
from tests.support.traces import job

GITTINS = replace(DEFAULT_POLICY, order="gittins", las_thresholds=(100.0,))


def exact(samples: list[float], attained: float) -> float:
    """The supremum over every quantum that ends at a sample (where it is reached)."""
    above = [s for s in samples if s > attained]
    best = 0.0
    for end in above:
        quantum = end - attained
        ending = sum(s <= end for s in above)
        served = sum(min(s - attained, quantum) for s in above)
        best = max(best, ending / served)
    return best


def test_the_index_falls_with_service_where_few_jobs_run_long():
    seen = ServiceDistribution.of([10.0] * 80 + [1000.0] * 20)
    assert seen.index(0.0) > seen.index(50.0) > 0.0


def test_the_index_rises_near_the_size_most_jobs_have():
    seen = ServiceDistribution.of([1800.0 + 60 * k for k in range(20)])  # 0.5-0.8 GPU-h
    assert seen.index(1700.0) > seen.index(0.0)


def test_a_job_past_every_finished_job_has_index_zero():
    seen = ServiceDistribution.of([10.0, 20.0])
    assert seen.index(20.0) == seen.index(500.0) == 0.0
    assert ServiceDistribution.of([]).index(0.0) == 0.0


@pytest.mark.parametrize("attained", [0.0, 5.0, 42.0, 300.0, 999.0])
def test_the_ladder_of_quanta_is_within_a_step_of_the_supremum(attained):
    samples = [float(s) for s in (3, 7, 20, 20, 45, 90, 130, 400, 800, 1000, 5000)]
    found = ServiceDistribution.of(samples).index(attained)
    assert exact(samples, attained) / 2**0.5 - 1e-12 <= found <= exact(samples, attained)


def test_a_level_goes_by_the_index_and_other_policies_by_when_queued():
    # both waited at level 1 (past 100 GPU-s); most jobs end at about 400 GPU-s, so the job
    # at 380 is likelier to end soon than the one at 150, though queued later
    early, late = pending(1, attained=150.0, submitted=0.0), pending(2, attained=380.0)
    late = replace(late, queued_at=50.0)
    early = replace(early, queued_at=10.0)
    seen = ServiceDistribution.of([400.0] * 50 + [5000.0] * 5)
    jobs = (early, late)

    def tried(policy, service) -> list[int]:  # noqa: ANN001
        queues = Queues(
            jobs, Ledger((), (), jobs, 8.0), policy, 60.0, {}, {}, {}, None, None, service
        )
        return [queued.job.job_id for queued in queues]

    assert tried(GITTINS, seen) == [2, 1]
    assert tried(GITTINS, None) == [1, 2]  # nothing seen: first come, first served
    assert tried(replace(GITTINS, order="las"), seen) == [1, 2]


def test_the_kept_order_is_sorted_anew_for_another_distribution():
    state, jobs = SchedulerState(), (pending(1, attained=150.0), pending(2, attained=380.0))
    first = ServiceDistribution.of([400.0] * 10)
    with leased_order(state, jobs, GITTINS, 0.0, first) as kept:
        assert isinstance(kept, KeptOrder) and kept.service is first
    with leased_order(state, jobs, GITTINS, 0.0, first) as again:
        assert again is kept
    with leased_order(state, jobs, GITTINS, 0.0, ServiceDistribution.of([200.0])) as other:
        assert other is not kept
    with leased_order(state, jobs, DEFAULT_POLICY, 0.0, first) as las:
        assert las is not None and las.service is None  # the distribution is gittins' only


def test_a_replay_learns_the_service_of_the_jobs_it_finished_not_the_censored():
    trace = [job(1, 0, 30, 2), job(2, 0, 50, 1, censored=True), job(3, 200, 10, 1)]
    seen = []

    def policy(snapshot, clock):  # noqa: ANN001
        seen.append(snapshot.service)
        return schedule(snapshot, clock)

    replay = Replay(cluster("1x4"), policy, 0.0, settings=GITTINS)
    replay.finished_service = [5.0]  # the history's, as ``simulate`` puts it
    replay.run(trace)
    assert seen[0] is not None and seen[0].samples == (5.0,)
    assert replay.finished_service == [5.0, 60.0, 10.0]  # GPU-seconds; job 2 was censored


def test_a_gittins_replay_runs_every_job():
    trace = [job(n, 10.0 * n, 60.0 + 40 * (n % 5), 1) for n in range(1, 40)]
    result = simulate(trace, cluster("1x2"), settings=GITTINS, service_history=(100.0,) * 5)
    assert len(result.records) == 39 and not result.unscheduled
