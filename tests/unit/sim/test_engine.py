"""The trace replay engine: exact timelines on tiny traces, invariants on random ones, and no
preemption loops (a job that preempts keeps the GPUs its victims free)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpupool.domain.jobs import Reason
from gpupool.domain.policy import DEFAULT_POLICY
from gpupool.domain.units import GiB
from gpupool.main import app
from gpupool.scheduler import schedule
from gpupool.scheduler.messages import NO_NODES_MESSAGE
from gpupool.scheduler.types import Clock, Decisions, NodeCapacity, Placement, Preemption, Snapshot
from gpupool.sim.engine import STUCK_MESSAGE, SimResult, VirtualClock, cluster, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.policies import named
from gpupool.sim.report import render
from gpupool.sim.traces import TraceJob, load_trace
from tests.support.traces import job

REPO = Path(__file__).resolve().parents[3]
TRACES = REPO.parent / "shared" / "data" / "traces"
EPS = 1e-9


def times(result: SimResult) -> dict[int, tuple[float, float]]:
    return {record.job_id: (record.start, record.end) for record in result.records}


# -- exact timelines on a 1x2 cluster ---------------------------------------------------------

ONE_TEAM = [job(1, 0, 10, 1), job(2, 1, 4, 1), job(3, 2, 3, 2), job(4, 3, 2, 1)]
TWO_TEAMS = [job(1, 0, 4, 2, "b"), job(2, 1, 2, 1, "a"), job(3, 1, 2, 1, "b"), job(4, 1, 2, 1, "a")]


def test_a_job_that_does_not_fit_lets_smaller_ones_pass():
    result = simulate(ONE_TEAM, cluster("1x2"))
    # Job 3 (2 GPUs) waits for both; job 4 takes the GPU job 2 frees at 5.
    assert times(result) == {1: (0, 10), 2: (1, 5), 3: (10, 13), 4: (5, 7)}
    assert [record.gpus for record in result.records] == [1, 1, 2, 1]
    assert result.unscheduled == ()
    assert result.total_gpus == 2
    assert result.cycles == 7  # times 0 1 2 3 5 7 10; at 13 nothing is pending


def test_one_team_metrics():
    metrics = summarize(simulate(ONE_TEAM, cluster("1x2")))
    assert metrics.jobs == 4
    assert metrics.avg_jct == pytest.approx(29 / 4)  # JCTs 10 4 11 4
    assert metrics.median_jct == pytest.approx(7)
    assert metrics.avg_queueing_delay == pytest.approx(10 / 4)  # delays 0 0 8 2
    assert metrics.utilisation == pytest.approx(22 / (2 * 13))  # 22 GPU-seconds in 13 s
    assert metrics.makespan == 13
    assert metrics.bounds.min_avg_jct == pytest.approx(19 / 4)
    assert metrics.bounds.offered_load == pytest.approx(22 / (2 * 10))
    assert metrics.worst_team_slowdown == pytest.approx((1 + 1 + 11 / 3 + 2) / 4)


def test_teams_are_served_in_turn():
    result = simulate(TWO_TEAMS, cluster("1x2"))
    # At 4 the heads of a (job 2) and b (job 3) start; job 4, a's second, waits for a GPU.
    assert times(result) == {1: (0, 4), 2: (4, 6), 3: (4, 6), 4: (6, 8)}
    metrics = summarize(result)
    assert metrics.worst_team == "a"
    assert metrics.worst_team_slowdown == pytest.approx(3.0)  # slowdowns 2.5 and 3.5
    assert metrics.jain_fairness == pytest.approx(4.75**2 / (2 * (3.0**2 + 1.75**2)))
    assert metrics.utilisation == pytest.approx(14 / 16)


def test_fractions_share_a_gpu():
    jobs = [job(1, 0, 6, 0.5), job(2, 0, 6, 0.5), job(3, 0, 6, 0.5), job(4, 1, 2, 1)]
    result = simulate(jobs, cluster("1x2"))
    assert times(result) == {1: (0, 6), 2: (0, 6), 3: (0, 6), 4: (6, 8)}
    assert [record.gpus for record in result.records] == [0.5, 0.5, 0.5, 1]
    assert len({record.shares[0].uuid for record in result.records[:2]}) == 1


def test_a_job_that_can_never_fit_is_unscheduled_at_submit():
    result = simulate([job(1, 0, 5, 1), job(2, 1, 5, 3)], cluster("1x2"))
    assert times(result) == {1: (0, 5)}
    [refused] = result.unscheduled
    assert (refused.job_id, refused.gpus, refused.submit) == (2, 3, 1)
    assert "3 GPUs" in refused.reason


def test_a_gang_larger_than_the_pool_is_unscheduled_at_submit():
    # 32 GPUs on 16: node placement makes 4 whole-node tasks, count placement 32 one-GPU
    # tasks; each task fits a node, the gang never fits the pool
    jobs = [job(1, 0, 5, 1), job(2, 1, 5, 32)]
    for placement, shape in (("node", "4 tasks of 8 GPUs"), ("count", "32 tasks of 1 GPU")):
        result = simulate(jobs, cluster("2x8"), placement=placement)
        assert times(result) == {1: (0, 5)}
        [refused] = result.unscheduled
        assert refused.job_id == 2 and refused.submit == 1
        assert f"a gang of {shape} each (32 GPUs) can never start" in refused.reason
        assert "at most" in refused.reason
        assert result.cycles == 1  # it never reached the scheduler


def test_node_placement_refuses_a_job_that_does_not_split_into_whole_nodes():
    result = simulate([job(1, 0, 5, 12)], cluster("2x8"))
    [refused] = result.unscheduled
    assert "12 GPUs are not a multiple of 8" in refused.reason
    assert "the largest node has 8 GPUs" in refused.reason
    assert times(simulate([job(1, 0, 5, 12)], cluster("2x8"), placement="count")) == {1: (0, 5)}


def test_a_gang_counts_only_the_nodes_of_its_gpu_type():
    typed = job(1, 0, 5, 16, types=("A100",))
    nodes = cluster("1x8:A100,1x8:T4")
    [refused] = simulate([typed], nodes).unscheduled
    assert "the pool holds at most 1 such tasks" in refused.reason
    assert simulate([replace(typed, gpu_types=())], nodes).unscheduled == ()


def test_the_command_counts_unschedulable_jobs_by_reason(tmp_path: Path):
    trace = tmp_path / "big.csv"
    trace.write_text("submit,duration,gpus,team\n0,10,1,a\n1,4,32,a\n2,3,32,a\n3,3,12,a\n")
    args = ["simulate", "--trace", f"csv:{trace}", "--cluster", "2x8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "3 jobs never ran (UNSCHEDULED):" in result.stderr
    assert "2 x a gang of 4 tasks of 8 GPUs each" in result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("default"))
    assert row.split()[1:3] == ["1", "3"]  # JOBS, UNSCHEDULED


def test_jobs_without_nodes_are_reported_not_looped_on():
    result = simulate([job(1, 0, 5, 1), job(2, 3, 5, 1)], ())
    assert result.records == ()
    assert [(item.job_id, item.reason) for item in result.unscheduled] == [
        (1, NO_NODES_MESSAGE),
        (2, NO_NODES_MESSAGE),
    ]


def test_a_policy_that_never_places_leaves_the_jobs_unscheduled():
    def idle(snapshot: Snapshot, clock: Clock) -> Decisions:
        return Decisions()

    result = simulate([job(1, 0, 5, 1), job(2, 7, 5, 1)], cluster("1x2"), idle)
    assert result.cycles == 2
    assert [(item.job_id, item.reason) for item in result.unscheduled] == [
        (1, STUCK_MESSAGE),
        (2, STUCK_MESSAGE),
    ]


def test_the_policy_sees_each_event_time_once_with_the_running_jobs():
    seen: list[tuple[float, list[int], list[int]]] = []

    def spy(snapshot: Snapshot, clock: Clock) -> Decisions:
        running = sorted(allocation.job_id for allocation in snapshot.allocations)
        seen.append((clock.now(), running, [pending.job_id for pending in snapshot.pending]))
        return schedule(snapshot, clock)

    simulate(ONE_TEAM, cluster("1x2"), spy)
    assert seen == [
        (0, [], [1]),
        (1, [1], [2]),
        (2, [1, 2], [3]),
        (3, [1, 2], [3, 4]),
        (5, [1], [3, 4]),
        (7, [1], [3]),
        (10, [], [3]),
    ]


def test_equal_inputs_give_equal_results():
    jobs = [*TWO_TEAMS, job(5, 2, 3, 0.25, "c"), job(6, 2, 1, 2, "c")]
    assert simulate(jobs, cluster("1x2")) == simulate(list(reversed(jobs)), cluster("1x2"))


def test_a_placement_of_a_job_not_pending_is_a_policy_bug():
    def rogue(snapshot: Snapshot, clock: Clock) -> Decisions:
        return Decisions(placements=[Placement(99, "node-000", (), 1.0, 0)])

    with pytest.raises(ValueError, match="job 99"):
        simulate([job(1, 0, 5, 1)], cluster("1x2"), rogue)


def test_a_preempted_job_is_requeued_and_redoes_the_restart_cost():
    # one team on one 2-GPU node: job 1 passes the first service level (1,800 GPU-seconds)
    # after 900 s; job 2 arrives at 1,000 s at level 0 and preempts it; job 1 resumes when
    # job 2 ends, with its remaining work plus the restart cost
    jobs = [job(1, 0, 10_000, 2), job(2, 1_000, 100, 2)]
    result = simulate(jobs, cluster("1x2"), restart_cost=60)
    first, second = result.records
    assert (second.start, second.end, second.preemptions) == (1_000, 1_100, 0)
    assert (first.start, first.end, first.preemptions) == (0, 1_100 + 9_000 + 60, 1)
    assert result.preemptions == 1


def test_without_preemption_a_long_job_keeps_its_gpus():
    jobs = [job(1, 0, 10_000, 2), job(2, 1_000, 100, 2)]
    result = simulate(jobs, cluster("1x2"), settings=named("drf"))
    first, second = result.records
    assert (first.end, second.start, result.preemptions) == (10_000, 10_000, 0)


def test_a_policy_that_preempts_a_job_not_running_is_refused():
    def preempting(snapshot: Snapshot, clock: Clock) -> Decisions:
        return Decisions(preemptions=[Preemption(7, 1, Reason.PREEMPTED, "test")])

    with pytest.raises(ValueError, match="not running"):
        simulate([job(1, 0, 5, 1)], cluster("1x2"), preempting)


def test_count_placement_spreads_a_job_over_nodes_and_node_placement_makes_a_gang():
    jobs = [job(1, 0, 10, 8)]
    counted = simulate(jobs, cluster("4x4"), placement="count")
    by_nodes = simulate(jobs, cluster("4x4"), placement="node")
    for result in (counted, by_nodes):
        assert [record.gpus for record in result.records] == [8]
        assert len({part.uuid for part in result.records[0].shares}) == 8
    assert not counted.unscheduled and not by_nodes.unscheduled


def test_bad_traces_are_refused():
    with pytest.raises(ValueError, match="twice"):
        simulate([job(1, 0, 5, 1), job(1, 2, 5, 1)], cluster("1x2"))
    with pytest.raises(ValueError, match="restart_cost"):
        simulate([], cluster("1x2"), restart_cost=-1)


def test_the_virtual_clock_only_moves_forward():
    clock = VirtualClock()
    clock.advance_to(5)
    assert clock.now() == 5
    with pytest.raises(ValueError):
        clock.advance_to(4)


# -- clusters ----------------------------------------------------------------------------------


def test_cluster_of_one_group():
    nodes = cluster("4x4")
    assert [node.name for node in nodes] == ["node-000", "node-001", "node-002", "node-003"]
    gpus = nodes[0].gpus
    assert [(gpu.index, gpu.model, gpu.memory_bytes) for gpu in gpus] == [
        (index, "GPU", 80 * GiB) for index in range(4)
    ]
    assert len({gpu.uuid for node in nodes for gpu in node.gpus}) == 16


def test_cluster_of_several_groups():
    nodes = cluster("1x8:A100:40, 2x4:T4:16GiB")
    assert [(len(node.gpus), node.gpus[0].model, node.gpus[0].memory_bytes) for node in nodes] == [
        (8, "A100", 40 * GiB),
        (4, "T4", 16 * GiB),
        (4, "T4", 16 * GiB),
    ]


@pytest.mark.parametrize("spec", ["16", "x4", "0x4", "4x", "4x4:A:80:9", "4x4:A:lots", ""])
def test_bad_cluster_specs(spec: str):
    with pytest.raises(ValueError, match="4x4|GPU memory"):
        cluster(spec)


# -- invariants on random traces ---------------------------------------------------------------


@st.composite
def traces(draw) -> list[TraceJob]:
    count = draw(st.integers(1, 12))
    return [
        job(
            job_id,
            submit=float(draw(st.integers(0, 20))),
            duration=float(draw(st.integers(1, 15))),
            gpus=draw(st.sampled_from([0.25, 0.5, 1, 1, 2, 3])),
            team=draw(st.sampled_from(["a", "b", "c"])),
        )
        for job_id in range(1, count + 1)
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), st.sampled_from(["1x2", "2x2", "1x4,1x1"]))
def test_replay_invariants(jobs: list[TraceJob], spec: str):
    # without preemption, each job runs once, from its start to its end
    nodes = cluster(spec)
    result = simulate(
        jobs, nodes, settings=replace(DEFAULT_POLICY, reclaim=False, las_preemption=False)
    )
    by_id = {item.job_id: item for item in jobs}
    ran = {record.job_id for record in result.records}
    assert ran | {item.job_id for item in result.unscheduled} == set(by_id)
    assert not ran & {item.job_id for item in result.unscheduled}
    for record in result.records:
        assert record.start >= by_id[record.job_id].submit
        assert record.end - record.start == by_id[record.job_id].duration
    check_never_over_allocated(result, nodes)
    metrics = summarize(result)
    assert metrics.avg_jct >= metrics.bounds.min_avg_jct - EPS
    assert metrics.avg_jct >= metrics.bounds.srpt_avg_jct - EPS
    assert metrics.utilisation <= metrics.bounds.max_utilisation + EPS


def check_never_over_allocated(result: SimResult, nodes: tuple[NodeCapacity, ...]) -> None:
    """At every start, the shares held of each GPU add up to at most the whole GPU."""
    gpus = {gpu.uuid for node in nodes for gpu in node.gpus}
    for moment in {record.start for record in result.records}:
        held: dict[str, float] = defaultdict(float)
        for record in result.records:
            if record.start <= moment < record.end:
                for part in record.shares:
                    held[part.uuid] += part.share
        assert set(held) <= gpus
        assert all(total <= 1 + EPS for total in held.values()), held


# -- the real Philly subset --------------------------------------------------------------------

TIRESIAS_SUBSET = "?teams=11cb48&start=2017-10-01&end=2017-11-01"


@pytest.mark.skipif(not TRACES.is_dir(), reason=f"{TRACES} is absent: traces live beside the repo")
def test_philly_11cb48_october_on_4x4_keeps_the_invariants():
    trace = load_trace(f"philly:{TRACES / 'philly.csv'}{TIRESIAS_SUBSET}")
    result = simulate(trace.jobs, cluster("4x4"))
    metrics = summarize(result)
    print(render([("default", metrics)]))
    assert len(result.records) == len(trace.jobs)  # 8- and 16-GPU jobs run as gangs
    assert all(math.isfinite(record.end) for record in result.records)
    assert metrics.utilisation <= metrics.bounds.max_utilisation + EPS
    assert all(record.jct >= record.duration for record in result.records)
    assert metrics.avg_jct >= metrics.bounds.min_avg_jct


# -- the simulate command ----------------------------------------------------------------------


def test_the_command_prints_a_row_per_policy_and_the_bounds(tmp_path: Path):
    trace = tmp_path / "tiny.csv"
    trace.write_text("submit,duration,gpus,team\n0,10,1,a\n1,4,1,a\n2,3,2,a\n3,2,1,a\n")
    result = CliRunner().invoke(app, ["simulate", "--trace", f"csv:{trace}", "--cluster", "1x2"])
    assert result.exit_code == 0, result.output
    assert "default" in result.stdout
    assert "avg JCT >= 5 s (mean isolated runtime)" in result.stdout


def test_the_vc_mode_guarantees_each_team_its_share_and_adds_a_row_per_team(tmp_path: Path):
    trace = tmp_path / "teams.csv"
    trace.write_text("submit,duration,gpus,team\n0,30,1,a\n0,10,1,b\n1,10,1,a\n2,10,1,b\n")
    args = ["simulate", "--trace", f"csv:{trace}", "--cluster", "1x4", "--vc"]
    result = CliRunner().invoke(app, [*args, "--policy", "default", "--policy", "fifo"])
    assert result.exit_code == 0, result.output
    # a asks for 40 GPU-seconds of 60, b for 20: 4 GPUs split 2.67 -> 2 and 1.33 -> 1
    assert "virtual clusters: a 2, b 1 GPUs guaranteed" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line[:2] in ("a ", "b ")]
    assert [row[:4] for row in rows] == [
        ["a", "default", "2", "2"],
        ["a", "fifo", "2", "2"],
        ["b", "default", "1", "2"],
        ["b", "fifo", "1", "2"],
    ]


def test_an_unknown_policy_is_a_usage_error_listing_the_known_ones(tmp_path: Path):
    args = ["simulate", "--trace", "x.csv", "--cluster", "1x2", "--policy", "nonsense"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "unknown policy 'nonsense'; known: default, fifo, drf, srtf-oracle" in result.output


def test_a_policy_spec_sets_knobs_and_names_its_row(tmp_path: Path):
    # job 1 has run 2,000 s (past the first LAS level) when job 2 arrives: the default
    # preempts it for job 2; with min_runtime=3600 it has not run long enough to be preempted
    trace = tmp_path / "las.csv"
    trace.write_text("submit,duration,gpus,team\n0,5000,1,a\n2000,10,1,a\n")
    specs = ["default", "default:min_runtime=3600", "default:min_runtime=0,packing=best-fit"]
    args = ["simulate", "--trace", f"csv:{trace}", "--cluster", "1x1", "--restart-cost", "0"]
    for spec in specs:
        args += ["--policy", spec]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("POLICY"))
    end = header.index("PREEMPTIONS") + len("PREEMPTIONS")  # right-aligned under it
    rows = lines[lines.index(header) + 1 : lines.index(header) + 1 + len(specs)]
    preemptions = {row.split()[0]: int(row[:end].split()[-1]) for row in rows}
    assert preemptions == {specs[0]: 1, specs[1]: 0, specs[2]: 1}


def test_a_bad_policy_knob_is_a_usage_error_that_lists_the_knobs():
    base = ["simulate", "--trace", "x.csv", "--cluster", "1x2", "--policy"]
    runner = CliRunner()
    unknown = runner.invoke(app, [*base, "default:speed=9"], env={"COLUMNS": "250"})
    assert unknown.exit_code == 2
    assert "knobs: min_runtime, starvation_factor" in " ".join(unknown.output.split())
    negative = runner.invoke(app, [*base, "default:min_runtime=-5"], env={"COLUMNS": "250"})
    assert negative.exit_code == 2
    assert "min_runtime in 'default:min_runtime=-5' is a number of 0 or more" in " ".join(
        negative.output.split()
    )
    choice = runner.invoke(app, [*base, "fifo:packing=worst"], env={"COLUMNS": "250"})
    assert choice.exit_code == 2
    assert "packing in 'fifo:packing=worst' is one of fgd, best-fit" in " ".join(
        choice.output.split()
    )


# -- bounded cycles ------------------------------------------------------------------------------


def test_bounded_cycles_are_a_policy_knob_of_the_simulator(tmp_path: Path):
    trace = tmp_path / "burst.csv"
    trace.write_text("submit,duration,gpus,team\n" + "0,100,1,a\n" * 6)
    specs = ["default", "default:max_starts=2,max_tries=1"]
    args = ["simulate", "--trace", f"csv:{trace}", "--cluster", "1x4", "--restart-cost", "0"]
    for spec in specs:
        args += ["--policy", spec]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("default")]
    assert [row[0] for row in rows] == specs
    assert rows[0][1:] == rows[1][1:]  # all six start as soon without: the same figures
    bad = CliRunner().invoke(
        app, [*args[:-2], "--policy", "default:max_starts=1.5"], env={"COLUMNS": "250"}
    )
    assert bad.exit_code == 2
    assert "max_starts in 'default:max_starts=1.5' is a whole number of 0 or more" in " ".join(
        bad.output.split()
    )


# -- no preemption loops ---------------------------------------------------------------------------

# No preemption loops: a job that preempts gets the GPUs its victims free (nominations).
#
# The replay stops victims at once and runs the cycle again at the same instant, so a loop (the
# freed GPUs going to another job, the preempting job preempting again) shows as a job
# preempted several times at one instant. The Philly week that exposed it (team 2869ce's 8-GPU
# jobs preempted for its 32-GPU gangs on 48x8: 1,118 preemptions, one job 213 times) runs when
# the traces are beside the repository.


WEEK = "?start=2017-11-01&end=2017-11-08"


class Recorder:
    """The scheduler, noting what each cycle was given and what it decided."""

    def __init__(self) -> None:
        self.cycles: list[tuple[float, dict, dict]] = []
        self.at_once: Counter[tuple[int, float]] = Counter()  # preemptions per job and instant

    def __call__(self, snapshot, clock):  # noqa: ANN001, ANN204
        decisions = schedule(snapshot, clock)
        self.cycles.append((clock.now(), dict(snapshot.nominations), dict(decisions.nominations)))
        for preemption in decisions.preemptions:
            self.at_once[(preemption.job_id, clock.now())] += 1
        return decisions


def test_the_replay_carries_a_nomination_to_the_next_cycle_and_drops_it_at_the_start():
    # four long one-GPU jobs reach the third level; a four-GPU job of the team preempts them
    jobs = [job(1 + k, 0.0, 300_000.0, 1) for k in range(4)] + [job(9, 40_000.0, 1_000.0, 4)]
    recorder = Recorder()

    result = simulate(jobs, cluster("1x4"), restart_cost=60.0, policy=recorder)

    made = [i for i, (_, _, after) in enumerate(recorder.cycles) if 9 in after]
    assert made, "job 9 preempted and was nominated"
    first = made[0]
    assert recorder.cycles[first + 1][1] == recorder.cycles[first][2]  # given back next cycle
    assert all(9 not in given for _, given, _ in recorder.cycles[first + 2 :])
    assert result.preemptions == 4
    assert max(record.preemptions for record in result.records) == 1


@pytest.mark.skipif(
    not (TRACES / "philly.csv").is_file(), reason=f"{TRACES} is absent: traces live beside the repo"
)
def test_a_philly_week_on_48_nodes_has_no_preemption_loop():
    jobs = load_trace(f"philly:{TRACES / 'philly.csv'}{WEEK}").jobs
    recorder = Recorder()

    result = simulate(jobs, cluster("48x8"), restart_cost=60.0, policy=recorder)

    per_job = Counter({record.job_id: record.preemptions for record in result.records})
    assert not result.unscheduled
    assert max(recorder.at_once.values()) == 1  # no job preempted twice at one instant
    assert result.preemptions / len(result.records) < 1
    # the most a job is preempted: 11 (LAS and reclaim, hours apart), not hundreds
    assert max(per_job.values()) <= 20
