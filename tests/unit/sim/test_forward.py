"""Simulating forward from a given state (the ETA predictor's engine) and the predictor's
assumptions, on a virtual clock: start times follow from the durations given."""

from __future__ import annotations

import pytest

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.types import Allocation, GpuShare, PendingJob, Snapshot, TeamQuota
from gpupool.services.core import NOT_YET, Bounds
from gpupool.services.scheduling._eta import DEFAULT_DURATION, Durations, predict
from gpupool.sim.engine import VirtualClock, cluster
from gpupool.sim.forward import (
    DEFAULT_HORIZON,
    DEFAULT_MAX_CYCLES,
    Forward,
    ForwardState,
    Running,
    Waiting,
    forward,
    held_request,
)

NODES = cluster("1x4")
NOW = 10_000.0


def holding(job_id: int, gpus: int, first_gpu: int = 0, **fields: object) -> Allocation:
    shares = tuple(GpuShare(NODES[0].gpus[first_gpu + i].uuid, 1.0, 0) for i in range(gpus))
    values = {"team": "t", "user": "u", "started_at": NOW, "preemptible": False} | fields
    return Allocation(job_id, NODES[0].name, shares, 1.0, 0, **values)


def waiting(job_id: int, gpus: float, team: str = "t", **fields: object) -> PendingJob:
    values = {"priority": 0, "submitted_at": NOW - 100 + job_id} | fields
    return PendingJob(job_id, team, "u", request=ResourceRequest(gpus=gpus), **values)


def test_a_waiting_job_starts_when_the_running_job_ends() -> None:
    state = ForwardState(
        NOW, NODES, [Running((holding(1, 4),), 500.0)], [Waiting(waiting(2, 2), 60)]
    )
    result = forward(state)
    assert result.starts == {2: NOW + 500}
    assert result.stopped == "done"


def test_the_forecast_leaves_the_control_loops_state_to_it() -> None:
    """The control loop's next cycle finds the capacity, queues and running jobs its last
    cycle kept, not those of the forecast's world (which it would have to work out anew):
    the forecast's cycles keep a state of their own, from one to the next."""
    loop = SchedulerState()
    at_loop = Snapshot(NODES, (holding(1, 1),), (waiting(2, 1), waiting(3, 4)))
    schedule(at_loop, VirtualClock(NOW), loop)
    kept = [loop.capacity, loop.order, loop.running]
    state = ForwardState(
        NOW, NODES, [Running((holding(5, 2),), 300.0)], [Waiting(waiting(6, 4), 60)]
    )
    run = Forward(state, None, DEFAULT_HORIZON, DEFAULT_MAX_CYCLES)
    assert run.run().starts == {6: NOW + 300}
    after = [loop.capacity, loop.order, loop.running]
    assert all(a is b and a is not None for a, b in zip(after, kept, strict=True))
    assert run.kept is not loop and run.kept.capacity is not None


def test_jobs_that_fit_now_start_now_and_the_rest_in_turn() -> None:
    jobs = [Waiting(waiting(i, 2), 100.0 * i) for i in (1, 2, 3)]
    result = forward(ForwardState(NOW, NODES, [], jobs))
    assert result.starts == {1: NOW, 2: NOW, 3: NOW + 100}


def test_the_horizon_and_the_cycle_cap_bound_the_work() -> None:
    state = ForwardState(
        NOW, NODES, [Running((holding(1, 4),), 5000.0)], [Waiting(waiting(2, 1), 1)]
    )
    assert forward(state, horizon=1000).stopped == "horizon"
    assert forward(state, horizon=1000).starts == {}
    capped = forward(state, max_cycles=1)
    assert (capped.stopped, capped.cycles, capped.starts) == ("cycles", 1, {})


def test_a_job_over_its_teams_limit_is_stuck_when_nothing_runs() -> None:
    quotas = [TeamQuota("t", {}, limit=1)]
    result = forward(ForwardState(NOW, NODES, [], [Waiting(waiting(1, 2), 10)], quotas=quotas))
    assert (result.stopped, result.starts) == ("stuck", {})


def test_a_preempted_running_job_is_queued_again_with_what_it_held() -> None:
    request = held_request(holding(1, 2))
    assert (request.gpus, request.gpu_memory_bytes) == (2, None)
    share = Allocation(1, NODES[0].name, (GpuShare("g", 0.5, 1 << 30),), 2.0, 1 << 20)
    request = held_request(share)
    assert (request.gpus, request.gpu_memory_bytes, request.cpus) == (0.5, 1 << 30, 2.0)


def test_durations_come_from_max_runtime_then_user_then_team_then_the_default() -> None:
    known = Durations({"ann": (120.0,)}, {"ml": (300.0,)})
    assert known.of("ann", "ml", 60.0).basis == "max_runtime"
    assert known.of("ann", "ml", None).seconds == 120
    assert known.of("bob", "ml", None).seconds == 300
    assumed = known.of("bob", "cv", None)
    assert (assumed.seconds, assumed.basis) == (DEFAULT_DURATION, "default")
    assert "default" in assumed.text


def test_predict_takes_off_what_a_running_job_has_run() -> None:
    snapshot = Snapshot(
        NODES,
        (holding(1, 4, started_at=NOW - 900, max_runtime=1000.0),),
        (waiting(2, 1),),
    )
    forecast = predict(snapshot, Durations(), NOW)
    estimate = forecast.estimate(2)
    assert estimate.at == pytest.approx(NOW + 100)
    assert (estimate.unknown, estimate.duration.basis) == (None, "default")


def test_jobs_beyond_the_cap_and_jobs_not_seen_have_a_reason_instead() -> None:
    pending = tuple(waiting(i, 4) for i in range(1, 5))
    snapshot = Snapshot(NODES, (holding(99, 4),), pending)
    forecast = predict(snapshot, Durations(), NOW, bounds=Bounds(max_jobs=2))
    assert set(forecast.starts) == {1, 2}
    assert "only the first 2" in forecast.estimate(3).unknown
    assert forecast.estimate(77).unknown == NOT_YET
    assert forecast.knows(3) and not forecast.knows(77)


def test_the_forecast_is_the_same_for_the_same_input() -> None:
    pending = tuple(waiting(i, [1, 2, 4][i % 3], team=f"t{i % 2}") for i in range(1, 40))
    snapshot = Snapshot(NODES, (holding(99, 2),), pending)
    first = predict(snapshot, Durations(), NOW)
    assert first.starts == predict(snapshot, Durations(), NOW).starts
    assert len(first.starts) == 39 and first.stopped == "done"


def test_a_preempted_job_runs_again_later_and_only_waiting_jobs_get_a_start() -> None:
    long_running = holding(1, 4, preemptible=True, started_at=NOW - 86400, attained=1e6)
    state = ForwardState(
        NOW, NODES, [Running((long_running,), 1000.0)], [Waiting(waiting(2, 4), 300.0)]
    )
    seen: list[tuple[float, list[int], list[int]]] = []

    def spy(snapshot, clock):  # noqa: ANN001, ANN202
        decisions = schedule(snapshot, clock)
        placed = [p.job_id for p in decisions.placements]
        seen.append((clock.now(), placed, [p.job_id for p in decisions.preemptions]))
        return decisions

    result = forward(state, spy)
    assert result.starts == {2: NOW}
    assert (NOW, [], [1]) in seen, "job 2 preempts the long-running job 1"
    assert (NOW + 300, [1], []) in seen, "job 1 starts again when job 2 ends"


def test_past_usage_decays_and_what_the_simulation_adds_counts() -> None:
    seen: list[dict[str, float]] = []

    def spy(snapshot, clock):  # noqa: ANN001, ANN202
        seen.append(dict(snapshot.usage))
        return schedule(snapshot, clock)

    half_life = DEFAULT_POLICY.usage_half_life
    state = ForwardState(
        NOW,
        NODES,
        [Running((holding(1, 4, user="ann"),), half_life)],
        [Waiting(waiting(2, 4), 10.0)],
        usage={"bob": 1000.0},
    )
    forward(state, spy)
    assert seen[0]["bob"] == pytest.approx(1000.0) and seen[0]["ann"] == pytest.approx(0.0)
    assert seen[-1]["bob"] == pytest.approx(500.0), "halved after one half-life"
    assert seen[-1]["ann"] > 0
