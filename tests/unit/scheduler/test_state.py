"""What the scheduler keeps from one cycle to the next (``state``): a ``SchedulerState`` of
its owner's, handed from cycle to cycle, and its helpers: the allocations by key and their
changes worked out once per tuple, and per-object maps emptied when full."""

from __future__ import annotations

from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler import capacity as capacity_module
from gpupool.scheduler.kept import changes
from gpupool.scheduler.state import (
    CACHED_MAX,
    allocations_by_key,
    allocations_changed,
    remembered,
)
from gpupool.scheduler.types import Snapshot
from tests.support.clock import ManualClock
from tests.support.scheduling import NOW, fresh, gpu_node, pending, running


def kept_objects(state: SchedulerState) -> list[object]:
    """What a state's cycles hand on: capacity, queues, running jobs."""
    return [state.capacity, state.order, state.running]


# -- a state of its owner's ----------------------------------------------------------------------


def test_cycles_with_a_state_of_their_own_leave_the_loops_state_alone():
    """The forecast runs the scheduler forward from another state beside the control loop:
    its cycles keep a state of their own, and the loop's next cycle finds its own again."""
    nodes = (gpu_node("node-a", 8), gpu_node("node-b", 8))
    held = (running(100, "node-a", [0, 1]), running(101, "node-b", [0]))
    loop, forecast = SchedulerState(), SchedulerState()
    at_loop = Snapshot(nodes, held, tuple(pending(i, gpus=1) for i in range(1, 4)))
    schedule(at_loop, ManualClock(NOW), loop)
    before = kept_objects(loop)
    assert all(value is not None for value in before)

    other = Snapshot(nodes, (), tuple(pending(i, gpus=2) for i in range(10, 20)))
    first = schedule(other, ManualClock(NOW), forecast)
    assert schedule(other, ManualClock(NOW), forecast) == first == fresh(other)
    assert all(a is b for a, b in zip(kept_objects(loop), before, strict=True))
    assert not any(a is b for a, b in zip(kept_objects(forecast), before, strict=True))
    assert schedule(at_loop, ManualClock(NOW), loop) == fresh(at_loop)


def test_a_state_hands_its_objects_from_cycle_to_cycle(monkeypatch):
    nodes = (gpu_node("node-a", 8),)
    snapshot = Snapshot(nodes, (running(100, "node-a", [0]),), (pending(1, gpus=2),))
    built: list[int] = []
    build = capacity_module.build_capacity
    monkeypatch.setattr(capacity_module, "build_capacity", lambda *a: built.append(1) or build(*a))
    state = SchedulerState()
    for _ in range(3):
        assert schedule(snapshot, ManualClock(NOW), state) == fresh(snapshot)
    assert built == [1]  # the first cycle built one, the others brought it up to date


def test_states_made_apart_share_no_map():
    one, other = SchedulerState(), SchedulerState()

    remembered(one.node_gpus, "node-a", ("kept",))

    assert other.node_gpus == {}
    assert one.parking is not other.parking
    assert kept_objects(other) == [None, None, None]


# -- the allocations by key, and their changes -----------------------------------------------------


def test_a_tuple_of_allocations_is_keyed_once_by_job_and_task():
    state = SchedulerState()
    first, second = running(1, "node-a"), running(1, "node-b", task=1)
    allocations = (first, second)

    keyed = allocations_by_key(state, allocations)

    assert keyed == {(1, 0): first, (1, 1): second}
    assert allocations_by_key(state, allocations) is keyed
    again = allocations_by_key(state, (first, second))  # an equal tuple, another object
    assert again == keyed and again is not keyed


def test_a_list_of_allocations_is_keyed_anew_each_time_it_is_asked():
    """A list may change under the same object."""
    state = SchedulerState()
    allocations = [running(1, "node-a")]
    keyed = allocations_by_key(state, allocations)

    allocations.append(running(2, "node-a"))

    assert sorted(allocations_by_key(state, allocations)) == [(1, 0), (2, 0)]
    assert sorted(keyed) == [(1, 0)]
    assert state.allocations_keyed is None


def test_the_changes_between_two_maps_are_worked_out_once_for_the_same_two():
    state = SchedulerState()
    one, two, three = running(1, "node-a"), running(2, "node-a"), running(3, "node-a")
    known = allocations_by_key(state, (one, two))
    present = allocations_by_key(state, (two, three))

    found = allocations_changed(state, known, present)

    assert found == ([one], [three]) == changes(known, present)
    assert allocations_changed(state, known, present) is found
    assert allocations_changed(state, present, known) == ([three], [one])


# -- per-object maps -------------------------------------------------------------------------------


def test_an_entry_is_remembered_under_its_key_and_returned():
    cache: dict = {"node-a": ("old",)}

    assert remembered(cache, "node-a", ("new",)) == ("new",)
    assert remembered(cache, "node-b", ("b",)) == ("b",)
    assert cache == {"node-a": ("new",), "node-b": ("b",)}


def test_a_full_map_is_emptied_before_the_next_entry():
    almost = dict.fromkeys(range(CACHED_MAX - 1), ())
    remembered(almost, "last", ("fits",))
    assert len(almost) == CACHED_MAX

    remembered(almost, "next", ("alone",))

    assert almost == {"next": ("alone",)}
