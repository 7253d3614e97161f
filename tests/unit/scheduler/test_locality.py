"""Locality (``scheduler.locality``): a job that fetches things onto its nodes goes, among
the spots where it fits now, to the node with the fewest bytes left to fetch; equal spots
keep the order of placement without locality, and a job without wants places as before."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.scheduler import schedule
from gpupool.scheduler.capacity import same_pool
from gpupool.scheduler.packing import CANDIDATES
from gpupool.scheduler.placement import SCANNED
from gpupool.scheduler.types import Decisions, NodeCapacity, PendingJob, Snapshot, Want
from tests.support.clock import ManualClock
from tests.support.scheduling import BEST_FIT, decide, gpu_node, pending, running
from tests.unit.scheduler.test_scheduler_properties import snapshots

GB = 10**9
DATA = Want("dataset:" + "d" * 64, 200 * GB)
ENV = Want("env:sha256:" + "e" * 64, 0)
IMAGE = Want("image:sha256:" + "f" * 64, 5 * GB)
OFF = replace(DEFAULT_POLICY, locality=False)
BEST_FIT_OFF = replace(BEST_FIT, locality=False)


def holding(node: NodeCapacity, *wants: Want) -> NodeCapacity:
    return replace(node, holds=frozenset(want.key for want in wants))


def wanting(job: PendingJob, *wants: Want, **fields: object) -> PendingJob:
    return replace(job, wants=wants, **fields)


def where(decisions: Decisions) -> dict[tuple[int, int], str]:
    """(job, task) -> node."""
    return {(p.job_id, p.task): p.node for p in decisions.placements}


def held(decisions: Decisions) -> dict[tuple[int, int], tuple[str, ...]]:
    return {(p.job_id, p.task): p.held for p in decisions.placements}


def test_a_node_holding_the_dataset_is_preferred_and_held_says_so() -> None:
    # without locality best fit takes node-a (the fewest free GPUs); node-b holds the data
    nodes = [gpu_node("node-a", 4), holding(gpu_node("node-b", 4), DATA)]
    busy = [running(100, "node-a", [0], preemptible=False)]
    job = wanting(pending(1), DATA)

    for policy in (DEFAULT_POLICY, BEST_FIT):
        assert where(decide(nodes, [pending(1)], busy, settings=policy)) == {(1, 0): "node-a"}
        decisions = decide(nodes, [job], busy, settings=policy)
        assert where(decisions) == {(1, 0): "node-b"}
        assert held(decisions) == {(1, 0): (DATA.key,)}


def test_fewer_bytes_left_to_fetch_wins_and_a_size_of_zero_still_counts() -> None:
    nodes = [
        holding(gpu_node("node-a", 4), ENV, IMAGE),  # would fetch the 200 GB dataset
        holding(gpu_node("node-b", 4), DATA),  # would fetch the 5 GB image and the env
        holding(gpu_node("node-c", 4), DATA, IMAGE),  # would fetch the env: 0 bytes, cost 1
        holding(gpu_node("node-d", 4), DATA, IMAGE, ENV),  # fetches nothing, but it is full
    ]
    busy = [running(100 + i, "node-d", [i], preemptible=False) for i in range(4)]

    decisions = decide(nodes, [wanting(pending(1), DATA, IMAGE, ENV)], busy)

    assert where(decisions) == {(1, 0): "node-c"}
    assert held(decisions) == {(1, 0): (DATA.key, IMAGE.key)}


def test_equal_holdings_keep_best_fit_and_no_holder_places_as_without_wants() -> None:
    nodes = [gpu_node(f"node-{name}", 4) for name in "abc"]
    busy = [running(100, "node-c", [0, 1], preemptible=False)]
    for policy in (DEFAULT_POLICY, BEST_FIT):
        before = where(decide(nodes, [pending(1)], busy, settings=policy))
        if policy is BEST_FIT:
            assert before == {(1, 0): "node-c"}  # the fewest free GPUs, not the first name
        # no node holds it: the same spot
        assert where(decide(nodes, [wanting(pending(1), DATA)], busy, settings=policy)) == before
        # every node holds it: the same spot too
        everywhere = [holding(node, DATA) for node in nodes]
        decisions = decide(everywhere, [wanting(pending(1), DATA)], busy, settings=policy)
        assert where(decisions) == before
        assert held(decisions) == {(1, 0): (DATA.key,)}


def test_a_job_does_not_wait_for_a_busy_holding_node() -> None:
    nodes = [holding(gpu_node("node-a", 2), DATA), gpu_node("node-b", 2)]
    busy = [running(100, "node-a", [0, 1], preemptible=False)]

    decisions = decide(nodes, [wanting(pending(1), DATA)], busy)

    assert where(decisions) == {(1, 0): "node-b"}
    assert held(decisions) == {(1, 0): ()}
    assert decisions.pending == {}


def test_a_holding_node_far_down_best_fits_order_is_still_found() -> None:
    # every node is equally free: best fit's first candidates are the first names
    count = CANDIDATES + 4
    nodes = [gpu_node(f"node-{index:02d}", 8) for index in range(count)]
    nodes[-1] = holding(nodes[-1], DATA)

    for policy in (DEFAULT_POLICY, BEST_FIT):
        assert where(decide(nodes, [pending(1)], settings=policy)) == {(1, 0): "node-00"}
        decisions = decide(nodes, [wanting(pending(1), DATA)], settings=policy)
        assert where(decisions) == {(1, 0): f"node-{count - 1:02d}"}


def test_with_many_holders_best_fits_order_is_walked_to_the_first_holder() -> None:
    # more holders than are looked at one by one: the first of them in best fit's order
    count = SCANNED + 40
    nodes = [gpu_node(f"node-{index:03d}", 8) for index in range(count)]
    nodes = nodes[:30] + [holding(node, DATA) for node in nodes[30:]]

    decisions = decide(nodes, [wanting(pending(1), DATA)], settings=BEST_FIT)
    assert where(decisions) == {(1, 0): "node-030"}
    decisions = decide(nodes, [wanting(pending(1), DATA)])
    assert held(decisions) == {(1, 0): (DATA.key,)}
    gang = wanting(pending(2, gpus=8, tasks=3), DATA, distinct_nodes=True)
    decisions = decide(nodes, [gang], settings=BEST_FIT)
    assert where(decisions) == {(2, 0): "node-030", (2, 1): "node-031", (2, 2): "node-032"}


def test_array_tasks_follow_the_first_task_within_a_cycle() -> None:
    # task 1 needs 4 GPUs: only node-c has them; task 2 (one GPU) would go by best fit to
    # node-a (2 free), but node-c fetches the dataset for task 1 and still has room
    nodes = [gpu_node("node-a", 8), gpu_node("node-c", 8)]
    busy = [running(100 + i, "node-a", [i], preemptible=False) for i in range(6)]
    jobs = [
        wanting(pending(1, gpus=4), DATA, array_id=7),
        wanting(pending(2, gpus=1), DATA, array_id=7),
    ]

    following = decide(nodes, jobs, busy)
    apart = decide(nodes, jobs, busy, settings=OFF)

    assert where(following) == {(1, 0): "node-c", (2, 0): "node-c"}
    assert where(apart) == {(1, 0): "node-c", (2, 0): "node-a"}
    # node-c held nothing in the snapshot: both fetch (once, on the node)
    assert held(following) == {(1, 0): (), (2, 0): ()}


def test_a_gangs_tasks_go_to_the_holding_node_task_by_task() -> None:
    nodes = [gpu_node("node-a", 8), gpu_node("node-b", 8), holding(gpu_node("node-c", 8), DATA)]
    gang = wanting(pending(1, gpus=4, tasks=2), DATA)

    assert where(decide(nodes, [replace(gang, wants=())])) == {(1, 0): "node-a", (1, 1): "node-a"}
    decisions = decide(nodes, [gang])
    assert where(decisions) == {(1, 0): "node-c", (1, 1): "node-c"}
    assert held(decisions) == {(1, 0): (DATA.key,), (1, 1): (DATA.key,)}


def test_a_job_over_several_nodes_puts_one_task_on_the_holder() -> None:
    nodes = [gpu_node("node-a", 8), gpu_node("node-b", 8), holding(gpu_node("node-c", 8), DATA)]
    job = wanting(pending(1, gpus=8, tasks=2), DATA, distinct_nodes=True)

    decisions = decide(nodes, [job])

    assert where(decisions) == {(1, 0): "node-c", (1, 1): "node-a"}
    assert held(decisions) == {(1, 0): (DATA.key,), (1, 1): ()}


def test_locality_off_places_as_without_wants_and_still_fills_held() -> None:
    nodes = [gpu_node("node-a", 4), holding(gpu_node("node-b", 4), DATA)]
    busy = [running(100, "node-b", [0], preemptible=False)]  # best fit: node-b anyway
    off = decide(nodes, [wanting(pending(1), DATA)], busy, settings=OFF)
    assert where(off) == {(1, 0): "node-b"}
    assert held(off) == {(1, 0): (DATA.key,)}

    busy = [running(100, "node-a", [0], preemptible=False)]  # best fit: node-a
    for policy in (OFF, BEST_FIT_OFF):
        off = decide(nodes, [wanting(pending(1), DATA)], busy, settings=policy)
        assert where(off) == {(1, 0): "node-a"}
        assert held(off) == {(1, 0): ()}


def test_a_fraction_goes_to_a_holding_node_and_shares_its_partly_used_gpu() -> None:
    nodes = [gpu_node("node-a", 2), holding(gpu_node("node-b", 2), DATA)]
    busy = [
        running(100, "node-a", [0], share=0.5, preemptible=False),
        running(101, "node-b", [1], share=0.5, preemptible=False),
    ]

    decisions = decide(nodes, [wanting(pending(1, gpus=0.5), DATA)], busy)

    [placement] = decisions.placements
    assert placement.node == "node-b"
    assert [part.uuid for part in placement.gpus] == ["GPU-node-b-1"]


def test_a_cpu_only_job_goes_to_the_holding_node() -> None:
    nodes = [gpu_node("node-a", 0), holding(gpu_node("node-b", 0), ENV)]

    decisions = decide(nodes, [wanting(pending(1, gpus=None), ENV)])

    assert where(decisions) == {(1, 0): "node-b"}
    assert held(decisions) == {(1, 0): (ENV.key,)}


# -- properties --------------------------------------------------------------------------------

KEYS = [DATA, ENV, IMAGE, Want("dataset:" + "a" * 64, 3 * GB)]


@st.composite
def with_holdings(draw) -> tuple[Snapshot, Snapshot]:  # noqa: ANN001
    """A random snapshot, and the same with random holdings on its nodes and random wants
    on its jobs."""
    plain = draw(snapshots())
    nodes = tuple(
        replace(node, holds=frozenset(w.key for w in draw(st.lists(st.sampled_from(KEYS)))))
        for node in plain.nodes
    )
    jobs = tuple(
        replace(job, wants=tuple(dict.fromkeys(draw(st.lists(st.sampled_from(KEYS), max_size=3)))))
        for job in plain.pending
    )
    return plain, replace(plain, nodes=nodes, pending=jobs)


def decisions_of(snapshot: Snapshot) -> tuple[list, dict]:
    decisions = schedule(snapshot, ManualClock())
    placements = [(p.job_id, p.task, p.node, p.gpus) for p in decisions.placements]
    return placements, {job: (r.code, r.message) for job, r in decisions.pending.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_holdings(), st.sampled_from([DEFAULT_POLICY, BEST_FIT]))
def test_jobs_without_wants_place_exactly_as_before_whatever_the_nodes_hold(
    pair: tuple[Snapshot, Snapshot], policy
) -> None:  # noqa: ANN001
    plain, local = pair
    plain = replace(plain, policy=policy)
    held_only = replace(local, pending=plain.pending, policy=policy)
    assert decisions_of(held_only) == decisions_of(plain)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_holdings(), st.sampled_from([DEFAULT_POLICY, BEST_FIT]))
def test_with_locality_off_wants_change_nothing_but_held(
    pair: tuple[Snapshot, Snapshot], policy
) -> None:  # noqa: ANN001
    plain, local = pair
    off = replace(policy, locality=False)
    assert decisions_of(replace(local, policy=off)) == decisions_of(replace(plain, policy=off))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_holdings())
def test_held_is_what_the_node_held_of_the_jobs_wants(
    pair: tuple[Snapshot, Snapshot],
) -> None:
    _, local = pair
    holds = {node.name: node.holds for node in local.nodes}
    wants = {job.job_id: job.wants for job in local.pending}
    decisions = schedule(local, ManualClock())
    for placement in decisions.placements:
        expected = tuple(w.key for w in wants[placement.job_id] if w.key in holds[placement.node])
        assert placement.held == expected


def test_nodes_that_differ_in_their_holdings_alone_are_the_same_pool() -> None:
    # the free capacity kept from the last cycle serves the next when only holdings changed
    nodes = (gpu_node("node-a", 4), gpu_node("node-b", 4))
    fetched = (holding(nodes[0], DATA), nodes[1])
    assert same_pool(nodes, fetched)
    assert not same_pool(nodes, (gpu_node("node-a", 2), nodes[1]))
    assert not same_pool(nodes, (holding(gpu_node("node-a", 2), DATA), nodes[1]))
    assert not same_pool(nodes, nodes[:1])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_holdings(), st.sampled_from([DEFAULT_POLICY, BEST_FIT]))
def test_one_job_starts_with_locality_whenever_it_does_without_and_fetches_no_more(
    pair: tuple[Snapshot, Snapshot], policy
) -> None:  # noqa: ANN001
    _, local = pair
    if not local.pending:
        return
    alone = replace(local, pending=local.pending[:1])
    job = alone.pending[0]
    holds = {node.name: node.holds for node in alone.nodes}

    def fetched(decisions: Decisions) -> int:
        nodes = {p.node for p in decisions.placements}
        return sum(max(w.size, 1) for n in nodes for w in job.wants if w.key not in holds[n])

    on = schedule(replace(alone, policy=policy), ManualClock())
    off = schedule(replace(alone, policy=replace(policy, locality=False)), ManualClock())
    assert bool(on.placements) == bool(off.placements)
    if job.tasks == 1:
        assert fetched(on) <= fetched(off)
