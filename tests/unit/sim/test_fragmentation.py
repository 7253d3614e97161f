"""FGD's fragmentation measure, the probe that follows a replay, and the fill experiment."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.main import app
from gpupool.sim.engine import NOT_PLACED_MESSAGE, cluster, simulate
from gpupool.sim.fragmentation import (
    FOREVER,
    FragmentationProbe,
    TaskShape,
    fill,
    fill_jobs,
    node_fragment,
    workload,
)
from gpupool.sim.policies import named
from gpupool.sim.report import render_fill
from gpupool.sim.traces import load_trace
from tests.support.traces import job

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces"
OPENB = TRACES / "alibaba-openb"


# -- the measure, on one node ------------------------------------------------------------------

FREE = [1.0, 1.0, 0.5, 0.2]  # two free GPUs, one half used, one 80 % used
MODELS = ["T4", "T4", "T4", "V100"]


@pytest.mark.parametrize(
    ("shape", "fragment"),
    [
        (TaskShape(0.3, (), 1.0), 0.2),  # only the GPU with 0.2 free cannot take 0.3
        (TaskShape(0.6, (), 1.0), 0.7),  # 0.5 and 0.2 are too small
        (TaskShape(1.0, (), 1.0), 0.7),  # whole GPUs: the partly used ones are fragments
        (TaskShape(2.0, (), 1.0), 0.7),
        (TaskShape(3.0, (), 1.0), 2.7),  # cannot run here: all free capacity is a fragment
        (TaskShape(0.3, ("V100",), 1.0), 2.7),  # the V100 has 0.2 free: cannot run here
        (TaskShape(0.1, ("V100",), 1.0), 2.5),  # it fits the V100: the T4s are fragments
        (TaskShape(1.0, ("T4",), 1.0), 0.7),
    ],
)
def test_node_fragment(shape: TaskShape, fragment: float):
    assert node_fragment(FREE, MODELS, shape) == pytest.approx(fragment)


def test_workload_weights_each_gpu_shape_by_its_frequency():
    jobs = [job(1, 0, 1, 0.5), job(2, 0, 1, 0.5), job(3, 0, 1, 2, types=("T4",)), job(4, 0, 1, 1)]
    jobs.append(job(5, 0, 1, None))  # no GPU: left out
    assert workload(jobs) == (
        TaskShape(0.5, (), 0.5),
        TaskShape(1.0, (), 0.25),
        TaskShape(2.0, ("T4",), 0.25),
    )


# -- the probe, following a replay ---------------------------------------------------------------


def test_the_probe_follows_starts_and_ends_and_finds_the_first_failure():
    # 1x2: two halves share GPU 0, a whole GPU takes GPU 1, then a whole GPU cannot start
    jobs = [job(1, 0, 10, 0.5), job(2, 1, 10, 0.5), job(3, 2, 10, 1), job(4, 3, 1, 1)]
    probe = FragmentationProbe(cluster("1x2"), workload(jobs), every_arrival=True)
    result = simulate(jobs, cluster("1x2"), probe=probe)
    assert [(sample.arrived, sample.allocated) for sample in probe.samples] == [
        (0.5, 0.5),
        (1.0, 1.0),
        (2.0, 2.0),
        (3.0, 2.0),
    ]
    assert probe.first_failure is not None and probe.first_failure.arrived == 3.0
    assert probe.allocated == 0.0 and result.records[-1].job_id == 4  # all ended: all free
    assert probe.fragmentation() == 0.0


def test_the_probe_measures_under_load_only_unless_asked():
    jobs = [job(1, 0, 10, 1), job(2, 1, 10, 0.5)]
    probe = FragmentationProbe(cluster("1x2"), workload(jobs))
    simulate(jobs, cluster("1x2"), probe=probe)
    first, second = probe.samples
    assert first.fragmentation is None  # 1 of 2 GPUs allocated: not loaded
    # 1.5 of 2 allocated is under the 90 % mark too
    assert second.fragmentation is None


# -- the fill experiment ---------------------------------------------------------------------------


def test_fill_jobs_repeat_the_trace_until_the_gpus_are_asked_for():
    tasks = fill_jobs([job(7, 5, 3, 1), job(8, 9, 3, 0.5)], gpus=3.2, batch=2)
    assert [(task.job_id, task.request.gpu_count) for task in tasks] == [
        (1, 1),
        (2, 0.5),
        (3, 1),
        (4, 0.5),
        (5, 1),
    ]
    assert [task.submit for task in tasks] == pytest.approx([0, 0, 0.001, 0.001, 0.002])
    assert {task.duration for task in tasks} == {FOREVER}
    assert fill_jobs([job(1, 0, 1, None)], 4) == []


def test_fill_drops_what_does_not_fit_and_reports_the_first_failure():
    # one 2-GPU node: 0.6 + 0.6 take both GPUs (0.4 free on each); the 1-GPU task fails
    jobs = [job(1, 0, 1, 0.6), job(2, 1, 1, 0.6), job(3, 2, 1, 1)]
    report = fill(jobs, cluster("1x2"), named("best-fit"), until=1.1, batch=1)
    assert report.tasks == 3 and report.failed == 1
    first = report.first_failure
    assert first is not None
    assert (first.arrived, first.allocated) == pytest.approx((2.2, 1.2))
    assert report.unallocated(first) == pytest.approx(0.4)
    # the typical task (0.6 twice as often as 1) can use neither 0.4: all of it is a fragment
    assert first.fragmentation == pytest.approx(0.8)
    assert report.at_levels[1.1].arrived == pytest.approx(2.2)


def test_drop_unplaced_fails_a_job_that_does_not_fit_on_arrival():
    jobs = [job(1, 0, 10, 2), job(2, 1, 1, 1)]
    quiet = simulate(jobs, cluster("1x2"), settings=named("best-fit"), drop_unplaced=True)
    assert [record.job_id for record in quiet.records] == [1]
    assert [(item.job_id, item.reason) for item in quiet.unscheduled] == [(2, NOT_PLACED_MESSAGE)]
    explained = simulate(jobs, cluster("1x2"), drop_unplaced=True)  # the scheduler's reason
    assert [item.reason for item in explained.unscheduled] == [
        "needs 1 GPU on one node; no GPU is free on any node"
    ]


@pytest.mark.skipif(not OPENB.is_dir(), reason=f"{OPENB} is absent: traces live beside the repo")
def test_fill_on_a_slice_of_the_alibaba_trace():
    trace = load_trace(
        f"alibaba:{OPENB / 'openb_pod_list_default.csv'}"
        f"?nodes={OPENB / 'openb_node_list_gpu_node.csv'}"
    )
    nodes = trace.nodes[:40]
    gpus = sum(len(node.gpus) for node in nodes)
    report = fill(trace.jobs[:400], nodes, named("best-fit"))
    assert report.total_gpus == gpus
    assert report.first_failure is not None
    first = report.first_failure
    assert first.allocated <= first.arrived <= 1.1 * gpus + 8  # the last task may overshoot
    assert 0 <= report.unallocated(first) < 1
    final = report.final
    assert final is not None and final.fragmentation is not None
    assert 0 <= final.fragmentation <= gpus - final.allocated + 1e-6
    assert report.failed > 0
    table = render_fill([("best-fit", report)])
    assert "UNALLOC AT FIRST FAILURE" in table and "best-fit" in table


def test_the_command_runs_the_fill_experiment(tmp_path: Path):
    trace = tmp_path / "tiny.csv"
    trace.write_text("submit,duration,gpus,team\n0,10,0.6,a\n1,4,0.6,a\n2,3,1,a\n")
    args = ["simulate", "--trace", f"csv:{trace}", "--cluster", "1x2", "--fragmentation"]
    result = CliRunner().invoke(app, [*args, "--policy", "best-fit", "--policy", "default"])
    assert result.exit_code == 0, result.output
    assert "FIRST FAILURE AT" in result.stdout
    assert "best-fit" in result.stdout and "default" in result.stdout
