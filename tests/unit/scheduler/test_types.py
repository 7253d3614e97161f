"""The scheduler's input and output (``types``): what a pending job holds once started,
which GPU models a job's types allow, and the defaults of allocations, snapshots and
decisions."""

from __future__ import annotations

from dataclasses import replace

from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.domain.units import GiB
from gpupool.scheduler.types import Decisions, PendingJob, Snapshot, model_matches
from tests.support.scheduling import A100, H100, NOW, allocation, decide, gpu_node, job

FOUR_GPUS = [gpu_node("node-a", 4)]


# -- a pending job started -----------------------------------------------------------------------


def two_task_job() -> PendingJob:
    """Job 7 of team t's user u: two 1-GPU tasks of an array, with every policy field set."""
    return (
        job(7)
        .team("t")
        .user("u")
        .priority(3)
        .gpus(1)
        .cpus(2.0)
        .policy_fields(
            tasks=2,
            preemptible=False,
            gpu_types=("H100",),
            max_runtime=600.0,
            attained=50.0,
            array_id=4,
        )
        .build()
    )


def test_a_started_job_holds_each_placement_with_its_own_policy_fields():
    started = two_task_job()
    placements = decide(FOUR_GPUS, [started]).placements

    held = started.started(placements, NOW)

    assert [(a.node, a.gpus, a.cpus, a.memory_bytes, a.task) for a in held] == [
        (p.node, p.gpus, p.cpus, p.memory_bytes, p.task) for p in placements
    ]
    assert [a.task for a in held] == [0, 1]
    for part in held:
        assert (part.job_id, part.team, part.user, part.priority) == (7, "t", "u", 3)
        assert (part.preemptible, part.gpu_types, part.max_runtime) == (False, ("H100",), 600.0)
        assert (part.array_id, part.started_at, part.attained) == (4, NOW, 50.0)
        assert (part.checkpoint_at, part.stopping, part.standing) == (None, False, None)


def test_a_caller_tracking_service_gives_the_attained_even_when_none():
    started = two_task_job()
    placements = decide(FOUR_GPUS, [started]).placements

    assert {a.attained for a in started.started(placements, NOW, attained=75.0)} == {75.0}
    assert {a.attained for a in started.started(placements, NOW, attained=0.0)} == {0.0}


# -- GPU types -----------------------------------------------------------------------------------


def test_no_types_allow_any_model():
    assert model_matches((), A100)
    assert model_matches((), "")


def test_a_type_allows_a_model_that_contains_it_in_any_case():
    assert model_matches(("A100",), A100)
    assert model_matches(("a100-sxm4",), A100)
    assert not model_matches(("A100",), H100)
    assert model_matches(("L4", "H100"), H100)


def test_a_type_names_a_model_as_a_whole_name_so_an_a10_is_not_an_a100():
    """A type is part of the model's name that does not run on into more digits or letters:
    asking for an A10 must not land on an A100, nor an H100 on a GH100; a memory size, a
    variant's suffix and Alibaba's codes still match."""
    assert not model_matches(("A10",), A100)
    assert not model_matches(("H100",), "NVIDIA GH100")
    assert not model_matches(("A100",), "NVIDIA A10")
    assert model_matches(("A10",), "NVIDIA A10")
    assert model_matches(("A10",), "NVIDIA A10G")
    assert model_matches(("V100",), "V100M16") and model_matches(("V100",), "Tesla V100-SXM2-16GB")
    assert model_matches(("80GB",), A100) and model_matches(("80GB",), H100)
    assert model_matches(("sxm4-80gb",), A100)
    assert model_matches(("T4",), "Tesla T4") and not model_matches(("T4",), "NVIDIA RTX T40")


# -- defaults ------------------------------------------------------------------------------------


def test_an_allocation_told_nothing_else_is_preemptible_work_of_no_team_never_checkpointed():
    held = allocation(1, "node-a", (0, 1.0, 80 * GiB))

    assert (held.team, held.user, held.priority, held.task) == ("", "", 0, 0)
    assert (held.preemptible, held.stopping, held.checkpoint_at) == (True, False, None)
    assert (held.gpu_types, held.array_id, held.standing) == ((), None, None)


def test_snapshots_default_to_no_nominations():
    snapshot = Snapshot(tuple(FOUR_GPUS), (), ())
    assert snapshot.nominations == {}
    assert replace(snapshot).nominations == {}


def test_a_snapshot_explains_under_the_default_policy_with_no_quotas():
    snapshot = Snapshot(tuple(FOUR_GPUS), (), ())

    assert (snapshot.explain, snapshot.policy, snapshot.quotas) == (True, DEFAULT_POLICY, ())


def test_decisions_made_apart_share_no_list_or_map():
    one = Decisions()
    one.placements.extend(decide(FOUR_GPUS, [job(1).gpus(1).build()]).placements)
    one.pending[2] = decide(FOUR_GPUS, [job(2).gpus(8).build()]).pending[2]

    assert Decisions() == Decisions([], {}, [], {})
