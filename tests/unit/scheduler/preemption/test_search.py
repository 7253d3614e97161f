"""Finding victims for a pending job (``preemption.search``: ``Preemptor``): the node whose
victims cost least, a multi-GPU spot on one node, and a search that goes past the nodes that
could not free enough, or is not made where it cannot succeed."""

from __future__ import annotations

from gpupool.scheduler.capacity import Claim
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.fit import Where
from gpupool.scheduler.preemption import MAX_NODES_EXAMINED, Preemptor
from gpupool.scheduler.types import Snapshot
from tests.support.scheduling import (
    LEVEL_2,
    NOW,
    codes,
    decide,
    gpu_node,
    pending,
    quota,
    running,
    victims,
)

TWO_NODES = [gpu_node("node-a", 1), gpu_node("node-b", 1)]


# -- victims on one node -----------------------------------------------------------------------


def test_the_victims_freeing_a_multi_gpu_spot_are_on_one_node():
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 2)]
    held = [running(100 + i, f"node-{'ab'[i // 2]}", [i % 2]) for i in range(4)]

    decisions = decide(nodes, [pending(1, gpus=2)], held, [quota("a", 2)])

    assert sorted(victims(decisions)) in ([100, 101], [102, 103])


# -- the order of victims across nodes ---------------------------------------------------------


def test_across_nodes_the_lower_priority_job_goes_first():
    held = [
        running(100, "node-a", priority=1),
        running(101, "node-b", priority=0),
    ]

    decisions = decide(TWO_NODES, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {101: 1}


def test_across_nodes_the_higher_level_goes_first():
    held = [
        running(100, "node-a", attained=LEVEL_2, started_at=NOW - 500),
        running(101, "node-b", started_at=NOW - 100),
    ]

    decisions = decide(TWO_NODES, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {100: 1}


def test_across_nodes_the_job_checkpointed_most_recently_goes_first():
    held = [
        running(100, "node-a", started_at=NOW - 1_000, checkpoint_at=NOW - 900),
        running(101, "node-b", started_at=NOW - 1_000, checkpoint_at=NOW - 10),
    ]

    decisions = decide(TWO_NODES, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {101: 1}


def test_across_nodes_the_cheapest_set_wins_over_the_node_whose_victim_comes_first():
    """node-a's two one-GPU jobs each lose 100 GPU-s (the least of any victim, all at level
    0: they come first), 200 together; node-b's one two-GPU job loses 120: the cheaper set.
    The search goes on past node-a because node-b's floor is below node-a's cost (a floor
    that put the work lost where the standing belongs once stopped it at node-a)."""
    held = [
        running(100, "node-a", [0], started_at=NOW - 500, checkpoint_at=NOW - 100),
        running(101, "node-a", [1], started_at=NOW - 500, checkpoint_at=NOW - 100),
        running(102, "node-b", [0, 1], started_at=NOW - 500, checkpoint_at=NOW - 60),
    ]
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 2)]

    decisions = decide(nodes, [pending(1, gpus=2)], held, [quota("a", 2)])

    assert victims(decisions) == {102: 1}


def test_across_nodes_a_stopping_job_goes_first():
    for order in ((0, 1), (1, 0)):
        nodes = [TWO_NODES[order[0]], TWO_NODES[order[1]]]
        held = [
            running(100, "node-a"),
            running(101, "node-b", stopping=True),
        ]

        decisions = decide(nodes, [pending(1)], held, [quota("a", 1)])

        assert decisions.preemptions == []
        assert (
            decisions.pending[1].message
            == "waiting for 1 job of team b to stop; GPU 0 on node-b is being freed for it"
        )


# -- the search goes past nodes that could not free enough -------------------------------------


def crowded_nodes(team: str) -> tuple[list, list]:
    """More nodes than a search examines, each one GPU shared by a victim that comes first
    in victim order (checkpointed a moment ago) and a job that may not be preempted: ending
    the victim frees no whole GPU. Then one node whose victim (never checkpointed, so it
    comes last) holds its GPU whole."""
    count = MAX_NODES_EXAMINED + 6
    nodes = [gpu_node(f"node-{index:03d}", 1) for index in range(count)]
    held = []
    for index, node in enumerate(nodes):
        attained = LEVEL_2 if team == "a" else 0.0
        held.append(
            running(
                1000 + index,
                node.name,
                team=team,
                attained=attained,
                share=0.5,
                checkpoint_at=NOW - 10,
            )
        )
        held.append(running(3000 + index, node.name, team=team, share=0.5, preemptible=False))
    nodes.append(gpu_node("node-z", 1))
    held.append(running(100, "node-z", team=team, attained=LEVEL_2 if team == "a" else 0.0))
    return nodes, held


def test_a_victim_is_found_past_the_nodes_whose_victims_free_no_whole_gpu():
    nodes, held = crowded_nodes("a")  # the job's own team, two levels above it

    decisions = decide(nodes, [pending(1)], held)

    assert victims(decisions) == {100: 1}


def test_a_guarantee_is_reclaimed_past_the_nodes_whose_victims_free_no_whole_gpu():
    nodes, held = crowded_nodes("b")  # a borrower far above its guarantee (none)

    decisions = decide(nodes, [pending(1)], held, [quota("a", 1)])

    assert victims(decisions) == {100: 1}
    assert decisions.preemptions[0].message.startswith("preempted for a job of team a")


def test_a_smaller_job_still_searches_where_a_larger_one_found_too_few_victims():
    # job 1 (2 GPUs) fails: node-a could free one GPU at most; job 2 (1 GPU) of the same
    # team and rank is not taken to fail with it (only jobs asking 2 or more would)
    nodes = [gpu_node("node-a", 2)]
    held = [
        running(100, "node-a", [0], team="a", attained=LEVEL_2),
        running(101, "node-a", [1], team="a", preemptible=False),
    ]

    decisions = decide(nodes, [pending(1, gpus=2), pending(2, gpus=1)], held)

    assert victims(decisions) == {100: 2}
    assert codes(decisions)[1] == "InsufficientGpus"


def test_a_job_asking_as_many_gpus_as_no_node_could_free_is_not_searched_for(monkeypatch):
    # job 3 asks fewer CPUs than job 1, so the memo of failed searches (``NoVictims``) does
    # not cover it; but no node could free 2 GPUs for the team at job 1's rank
    nodes = [gpu_node("node-a", 2), gpu_node("node-b", 2)]
    held = [
        running(100, "node-a", [0], team="a", attained=LEVEL_2),
        running(101, "node-a", [1], team="a", preemptible=False),
        running(102, "node-b", [0, 1], team="a", preemptible=False),
    ]
    searched: list[int] = []
    search = Preemptor._one_task

    def counted(self, job, *args):  # noqa: ANN001, ANN202
        searched.append(job.job_id)
        return search(self, job, *args)

    monkeypatch.setattr(Preemptor, "_one_task", counted)
    jobs = [pending(1, gpus=2, cpus=4.0), pending(3, gpus=2, cpus=1.0)]

    decisions = decide(nodes, jobs, held)

    assert searched == [1]
    assert decisions.preemptions == []


def test_a_search_that_found_too_few_victims_is_made_again_once_capacity_grows():
    # node-a's GPU 1 is held for a nominated job: its one victim frees one GPU of the two job
    # 1 asks for. The nomination given up (capacity grows), job 2, asking as much at the
    # same rank, is searched for and finds that victim (the record of job 1's search is gone)
    nodes = [gpu_node("node-a", 2)]
    held = [running(100, "node-a", [0], team="a", attained=LEVEL_2)]
    snapshot = Snapshot(tuple(nodes), tuple(held), (pending(1, gpus=2), pending(2, gpus=2)), ())
    cycle = Cycle(snapshot, NOW)
    node = cycle.capacity.by_name["node-a"]
    gpu = node.gpus[1]
    nomination = Claim(node, ((gpu, 1.0, gpu.memory_bytes),))
    cycle.capacity.take(nomination, 0.0, 0)
    first, second = snapshot.pending
    demand = cycle.demands.of(first.request)

    assert cycle.preemptor.find(first, 0, demand, Where(())) is None

    cycle.capacity.give_back(nomination, 0.0, 0)
    cycle._capacity_grew()
    choice = cycle.preemptor.find(second, 0, demand, Where(()))

    assert choice is not None
    assert [victim.job_id for victim in choice.victims] == [100]
