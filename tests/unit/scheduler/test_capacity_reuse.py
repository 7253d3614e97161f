"""The free capacity kept from one cycle to the next (``capacity.leased_capacity``): a
cycle over a kept capacity decides as one over a capacity built anew, whatever the cycles
before it changed, and a cycle that fails leaves nothing half changed behind."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from hypothesis import given
from policy_builders import Clock, gpu_node, pending, running
from test_policy_properties import SETTINGS, long_queues

from gpupool.scheduler import capacity as capacity_module
from gpupool.scheduler import schedule
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.types import DEFAULT_POLICY, Decisions, Snapshot


def fresh(snapshot: Snapshot) -> Decisions:
    """The cycle over a capacity built anew (not the kept one)."""
    return Cycle(snapshot, Clock().now()).run()


def applied(snapshot: Snapshot, decisions: Decisions) -> Snapshot:
    """The next snapshot: the placed jobs run, the preempted ones and the first running job
    are gone (ended), the nominations stand."""
    jobs = {job.job_id: job for job in snapshot.pending}
    gone = {preemption.job_id for preemption in decisions.preemptions}
    if snapshot.allocations:
        gone.add(snapshot.allocations[0].job_id)
    allocations = [a for a in snapshot.allocations if a.job_id not in gone]
    by_job: dict[int, list] = {}
    for placement in decisions.placements:
        by_job.setdefault(placement.job_id, []).append(placement)
    for job_id, placements in by_job.items():
        allocations.extend(jobs[job_id].started(placements, Clock().now()))
    return replace(
        snapshot,
        allocations=tuple(allocations),
        pending=tuple(job for job in snapshot.pending if job.job_id not in by_job),
        nominations=dict(decisions.nominations),
    )


@SETTINGS
@given(long_queues())
def test_cycles_over_the_kept_capacity_decide_as_over_a_new_one(snapshot: Snapshot):
    for _ in range(3):
        decisions = schedule(snapshot, Clock())
        assert decisions == fresh(snapshot)
        assert schedule(snapshot, Clock()) == decisions  # the kept capacity was put back
        snapshot = applied(snapshot, decisions)


def test_a_cycle_that_fails_leaves_the_next_one_a_whole_capacity(monkeypatch):
    nodes = (gpu_node("node-a", 4), gpu_node("node-b", 2))
    held = (running(100, "node-a", [0, 1]),)
    jobs = (pending(1, gpus=2), pending(2, gpus=2), pending(3, gpus=1))
    snapshot = Snapshot(nodes, held, jobs, policy=DEFAULT_POLICY)
    expected = fresh(snapshot)
    run = Cycle.run

    def fails_after_placing(self):  # noqa: ANN001, ANN202
        run(self)  # its placements changed the kept capacity
        raise RuntimeError("a bug")

    monkeypatch.setattr(Cycle, "run", fails_after_placing)
    with pytest.raises(RuntimeError):
        schedule(snapshot, Clock())
    monkeypatch.setattr(Cycle, "run", run)

    assert schedule(snapshot, Clock()) == expected
    assert schedule(snapshot, Clock()) == expected


def test_a_cycle_beside_another_builds_its_own_capacity():
    nodes = (gpu_node("node-a", 8),)
    jobs = tuple(pending(i, gpus=1) for i in range(1, 6))
    snapshot = Snapshot(nodes, (), jobs, policy=DEFAULT_POLICY)
    expected = fresh(snapshot)
    results: list[Decisions] = []

    with capacity_module._LEASE:  # another cycle holds the kept capacity
        thread = threading.Thread(target=lambda: results.append(schedule(snapshot, Clock())))
        thread.start()
        thread.join()

    assert results == [expected]
    assert schedule(snapshot, Clock()) == expected
