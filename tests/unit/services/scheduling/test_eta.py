"""Estimated starts behind running jobs that have run past what was assumed of them, on a
fake clock (``now`` is given): what a job has already run is evidence of how long it runs."""

from __future__ import annotations

import pytest

from gpupool.domain.jobs import ResourceRequest
from gpupool.scheduler.types import Allocation, GpuShare, PendingJob, Snapshot
from gpupool.services.core import OUTRUN
from gpupool.services.scheduling._eta import DEFAULT_DURATION, Durations, assumptions, predict
from gpupool.sim.engine import cluster

NODES = cluster("1x4")
T0 = 1_800_000_000.0
HOUR = 3600.0


def holding(job_id: int, gpus: int, started_at: float, first_gpu: int = 0, **fields) -> Allocation:  # noqa: ANN003
    shares = tuple(GpuShare(NODES[0].gpus[first_gpu + i].uuid, 1.0, 0) for i in range(gpus))
    values = {"team": "ml", "user": "ann", "started_at": started_at, "preemptible": False}
    return Allocation(job_id, NODES[0].name, shares, 1.0, 0, **(values | fields))


def waiting(job_id: int, gpus: float) -> PendingJob:
    return PendingJob(
        job_id, "ml", "bob", priority=0, submitted_at=T0, request=ResourceRequest(gpus=gpus)
    )


def start_of(snapshot: Snapshot, durations: Durations, now: float, job_id: int = 9) -> float:
    estimate = predict(snapshot, durations, now).estimate(job_id)
    assert estimate.unknown is None, estimate.unknown
    return estimate.at


def test_a_running_job_is_given_the_median_of_the_finished_jobs_that_ran_longer() -> None:
    """ann's jobs ran 1 min, 10 min, 50 min and 2 h. Hers has run 1000 s: it is one of the
    long ones, assumed to run the median of 50 min and 2 h (5100 s), not the overall median."""
    history = Durations({"ann": (60.0, 600.0, 3000.0, 7200.0)})
    snapshot = Snapshot(NODES, (holding(1, 4, started_at=T0),), (waiting(9, 1),))

    assert start_of(snapshot, history, T0 + 1000) == pytest.approx(T0 + 5100)
    # later, past 50 min too: only the 2 h job ran longer; the estimate moves out with it,
    # instead of staying "in a minute" while the job runs on
    assert start_of(snapshot, history, T0 + 4000) == pytest.approx(T0 + 7200)


def test_past_all_of_its_users_jobs_a_running_job_is_compared_with_its_teams() -> None:
    history = Durations({"ann": (60.0, 120.0)}, {"ml": (60.0, 120.0, 5000.0)})
    snapshot = Snapshot(NODES, (holding(1, 4, started_at=T0),), (waiting(9, 1),))
    assert start_of(snapshot, history, T0 + 1000) == pytest.approx(T0 + 5000)
    left = history.left("ann", "ml", None, 1000.0)
    assert (left.seconds, left.basis) == (4000.0, "team_longer")


def test_without_history_the_default_holds_until_the_job_has_run_past_it() -> None:
    snapshot = Snapshot(NODES, (holding(1, 4, started_at=T0),), (waiting(9, 1),))
    assert start_of(snapshot, Durations(), T0 + 600) == pytest.approx(T0 + DEFAULT_DURATION)
    assert Durations().left("ann", "ml", None, 2 * HOUR).basis == "outrun"


def test_a_max_runtime_is_a_bound_whatever_the_history() -> None:
    history = Durations({"ann": (60.0,)})
    left = history.left("ann", "ml", 2 * HOUR, 1000.0)
    assert (left.seconds, left.basis) == (2 * HOUR - 1000.0, "max_runtime")


def test_a_job_that_outran_every_guess_is_assumed_to_run_as_long_again() -> None:
    """E-doubling: it has run 3 h, longer than any finished job of its user or team."""
    history = Durations({"ann": (60.0, 600.0)}, {"ml": (60.0, 600.0, 1200.0)})
    left = history.left("ann", "ml", None, 3 * HOUR)
    assert (left.seconds, left.basis, left.outrun) == (3 * HOUR, "outrun", True)


def test_a_start_resting_only_on_outrun_jobs_is_unknown_and_says_why() -> None:
    history = Durations({"ann": (60.0, 600.0)})
    snapshot = Snapshot(
        NODES,
        (holding(1, 2, started_at=T0), holding(2, 2, started_at=T0, first_gpu=2)),
        (waiting(9, 1),),
    )
    estimate = predict(snapshot, history, T0 + 3 * HOUR).estimate(9)
    assert (estimate.at, estimate.unknown) == (None, OUTRUN)
    assert "the running jobs have all outrun their estimates" in estimate.unknown
    assert any("outrun" in line for line in assumptions(predict(snapshot, history, T0).bounds))


def test_a_start_that_another_running_jobs_end_explains_keeps_its_estimate() -> None:
    """Job 1 outran its guesses; job 2 stops at its max runtime in 10 min. A 2-GPU job can
    start then; a 4-GPU job needs job 1's GPUs too, and so has no estimate."""
    history = Durations({"ann": (60.0, 600.0)})
    now = T0 + 3 * HOUR
    snapshot = Snapshot(
        NODES,
        (
            holding(1, 2, started_at=T0),
            holding(2, 2, started_at=now - 600, first_gpu=2, max_runtime=1200.0),
        ),
        (waiting(9, 2), waiting(10, 4)),
    )
    forecast = predict(snapshot, history, now)
    assert forecast.estimate(9).at == pytest.approx(now + 600)
    assert (forecast.estimate(10).at, forecast.estimate(10).unknown) == (None, OUTRUN)


def test_a_job_that_fits_now_starts_now_whatever_runs() -> None:
    history = Durations({"ann": (60.0,)})
    snapshot = Snapshot(NODES, (holding(1, 2, started_at=T0),), (waiting(9, 2),))
    assert start_of(snapshot, history, T0 + 3 * HOUR) == pytest.approx(T0 + 3 * HOUR)
