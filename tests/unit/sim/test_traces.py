"""Trace loaders: the public Philly and Alibaba traces, the generic CSV and the spec dispatch.

Figures come from the public traces in ../shared/data/traces beside the checkout (where they
come from: docs/scheduling.md); the tests that read them skip when that folder is absent.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpupool.domain.units import GiB, MiB
from gpupool.sim.traces import (
    ALIBABA_DEFAULT_TEAM,
    GPU_MEMORY_BYTES,
    PHILLY_CPUS,
    UNTIMED_DURATION,
    Trace,
    load_alibaba,
    load_alibaba_nodes,
    load_generic,
    load_philly,
    load_trace,
)

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
TRACES = SHARED / "data" / "traces"
PHILLY = TRACES / "philly.csv"
OPENB = TRACES / "alibaba-openb"
PODS = OPENB / "openb_pod_list_default.csv"
GPU_NODES = OPENB / "openb_node_list_gpu_node.csv"
ALL_NODES = OPENB / "openb_node_list_all_node.csv"

needs_traces = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"the public traces are not at {TRACES.resolve()}"
)

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PODS_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def in_order(trace: Trace) -> bool:
    keys = [(job.submit, job.job_id) for job in trace.jobs]
    return keys == sorted(keys)


# ------------------------------------------------------------------------------ Philly, real


@pytest.fixture(scope="module")
def philly() -> tuple[Trace, float]:
    if not TRACES.is_dir():
        pytest.skip(f"the public traces are not at {TRACES.resolve()}")
    began = time.perf_counter()
    trace = load_philly(PHILLY)
    return trace, time.perf_counter() - began


@needs_traces
def test_philly_whole_file_matches_the_readme(philly: tuple[Trace, float]) -> None:
    trace, _ = philly
    assert trace.skipped == 0
    assert len(trace.jobs) == 82_247 - trace.skipped
    assert len(trace.teams()) == 15
    gpus = Counter(int(job.request.gpu_count) for job in trace.jobs)
    assert gpus == {
        1: 76_627,
        2: 1_818,
        4: 1_870,
        8: 1_643,
        12: 7,
        16: 199,
        24: 7,
        32: 67,
        64: 6,
        128: 3,
    }
    teams = Counter(job.team for job in trace.jobs)
    assert teams.most_common(4) == [
        ("6214e9", 41_226),
        ("11cb48", 16_091),
        ("6c71a0", 9_953),
        ("b436b2", 7_423),
    ]
    run_times = sorted(job.duration for job in trace.jobs)
    assert run_times[len(run_times) // 2] == 1_144.0
    assert sum(run_times) / len(run_times) == pytest.approx(13_136, abs=1)


@needs_traces
def test_philly_times_count_from_the_first_submit(philly: tuple[Trace, float]) -> None:
    trace, _ = philly
    assert in_order(trace)
    assert trace.jobs[0].submit == 0.0
    assert trace.origin == datetime(2017, 9, 4, 10, 30, 41, tzinfo=UTC)
    last = datetime(2017, 12, 22, 8, 2, 11, tzinfo=UTC)
    trace_span = (last - trace.origin).total_seconds()  # of the trace's own calendar
    assert trace.span() == trace_span == 9_408_690.0
    assert sorted(job.job_id for job in trace.jobs) == list(range(1, 82_248))
    first_row = next(job for job in trace.jobs if job.job_id == 1)  # 2017-10-09 07:01:55,66.0
    expected = datetime(2017, 10, 9, 7, 1, 55, tzinfo=UTC) - trace.origin
    assert first_row.submit == expected.total_seconds()
    assert (first_row.duration, first_row.team, first_row.user) == (66.0, "11cb48", "11cb48")
    request = first_row.request
    assert (request.gpus, request.cpus, request.memory_bytes) == (1.0, PHILLY_CPUS, None)
    assert all(job.user == job.team and job.gpu_types == () for job in trace.jobs)


@needs_traces
def test_philly_parses_well_under_two_seconds(philly: tuple[Trace, float]) -> None:
    _, seconds = philly
    assert seconds < 2.0


@needs_traces
def test_tiresias_subset_is_team_11cb48_in_october_2017() -> None:
    trace = load_philly(PHILLY, teams={"11cb48"}, start="2017-10-01", end="2017-11-01")
    assert len(trace.jobs) == 6_134
    assert trace.teams() == ("11cb48",)
    assert trace.origin == datetime(2017, 10, 1, 0, 1, 55, tzinfo=UTC)
    assert trace.jobs[0].submit == 0.0
    assert in_order(trace)
    gpus = Counter(int(job.request.gpu_count) for job in trace.jobs)
    assert gpus == {1: 5_548, 2: 567, 4: 13, 8: 3, 16: 3}
    # The bounds matter: an hour's shift either way, or a closed October 31, miss the figure.
    shifted = load_philly(
        PHILLY,
        teams="11cb48",
        start=datetime(2017, 10, 1, 1, tzinfo=UTC),
        end=datetime(2017, 11, 1, 1, tzinfo=UTC),
    )
    assert len(shifted.jobs) == 6_130
    assert len(
        load_philly(PHILLY, teams={"11cb48"}, start="2017-10-01", end="2017-10-31").jobs
    ) == (5_955)


@needs_traces
def test_philly_limit_keeps_the_earliest_jobs(philly: tuple[Trace, float]) -> None:
    whole, _ = philly
    first = load_philly(PHILLY, limit=100)
    assert [job.job_id for job in first.jobs] == [job.job_id for job in whole.jobs[:100]]
    assert first.jobs[0].submit == 0.0


# ----------------------------------------------------------------------------- Philly, small


def test_philly_skips_and_counts_unusable_rows(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p.csv",
        PHILLY_HEADER
        + "2017-10-01 00:00:10,100.0,2,200.0,a\n"
        + "2017-10-01 00:00:00,50.0,1,50.0,b\n"
        + "2017-10-01 00:00:20,0.0,1,0.0,a\n"
        + "2017-10-01 00:00:30,10.0,0,0.0,b\n"
        + "2017-10-02 00:00:00,10.0,8,80.0,a\n",
    )
    trace = load_philly(path)
    assert trace.skipped == 2
    assert [(job.job_id, job.submit, job.team) for job in trace.jobs] == [
        (2, 0.0, "b"),
        (1, 10.0, "a"),
        (5, 86_400.0, "a"),
    ]
    assert trace.teams() == ("a", "b")
    assert trace.offered_gpu_seconds() == 200.0 + 50.0 + 80.0
    assert trace.span() == 86_400.0
    only_a = load_philly(path, teams=["a"], end=datetime(2017, 10, 1, 23, tzinfo=UTC))
    assert [job.job_id for job in only_a.jobs] == [1]
    assert only_a.skipped == 1  # the zero-duration row of team a, inside the bounds
    aware = datetime(2017, 10, 1, 2, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    assert [job.job_id for job in load_philly(path, start=aware).jobs] == [1, 5]
    assert load_philly(path, limit=0).jobs == ()
    with pytest.raises(ValueError, match="has no team c, zz; its teams .*: a, b$"):
        load_philly(path, teams=["a", "zz", "c"])


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2017-13-01 00:00:00,1.0,1,1.0,a", "line 3: timestamp '2017-13-01 00:00:00'"),
        ("2017-10-01 00:00:00,soon,1,1.0,a", "line 3: duration 'soon' is not a number"),
        ("2017-10-01 00:00:00,1.0,1.5,1.5,a", "line 3: gpus"),
        ("2017-10-01 00:00:00,1.0,1,1.0", "line 3: 4 fields, the header has 5"),
    ],
)
def test_philly_bad_rows_name_their_line(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER + "2017-10-01 00:00:00,1.0,1,1.0,a\n" + row)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        load_philly(path)


# ---------------------------------------------------------------------------- Alibaba, real


@needs_traces
def test_alibaba_default_pod_list() -> None:
    trace = load_alibaba(PODS)
    # 8,152 pods; openb-pod-7285 (Pending, deleted when created) has no run time.
    assert trace.skipped == 1
    assert len(trace.jobs) == 8_152 - 1 == 8_151
    assert trace.nodes == ()
    requests = [job.request for job in trace.jobs]
    # The README's 3,078 fractional pods include the skipped one (num_gpu 1, gpu_milli 230).
    assert sum(request.is_fractional for request in requests) == 3_078 - 1
    assert sum(request.gpus is None for request in requests) == 1_088
    whole = Counter(request.gpus for request in requests if (request.gpus or 0) >= 1)
    assert whole == {1.0: 3_911, 2.0: 16, 4.0: 15, 8.0: 44}
    assert Counter(job.team for job in trace.jobs) == {
        "LS": 4_647,
        "BE": 3_397,
        "Burstable": 100,
        "Guaranteed": 7,
    }
    assert in_order(trace)
    assert trace.span() == 12_901_761.0
    by_id = {job.job_id: job for job in trace.jobs}
    assert 7286 not in by_id
    shared = by_id[2]  # openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
    assert (shared.submit, shared.duration) == (427_061.0, 12_902_960.0 - 427_061.0)
    assert (shared.request.gpus, shared.request.cpus) == (0.46, 6.0)
    assert shared.request.memory_bytes == 12_288 * MiB
    assert (shared.team, shared.user, shared.gpu_types) == ("LS", "LS", ())
    pending = by_id[62]  # openb-pod-0061: Pending, never scheduled: deletion - creation
    assert pending.duration == 10_001_403.0 - 10_001_278.0
    assert by_id[1524].request.memory_bytes == 0  # openb-pod-1523 asks for 0 MiB


@needs_traces
def test_alibaba_gpu_types_come_from_gpu_spec() -> None:
    trace = load_alibaba(OPENB / "openb_pod_list_gpuspec33.csv")
    kinds = Counter(job.gpu_types for job in trace.jobs)
    assert sum(count for types, count in kinds.items() if types) == 2_388
    assert kinds[("T4",)] == 1_291
    # 'V100M16|V100M32' (141) and 'V100M16|V100M32|V100M32' (22): duplicates dropped.
    assert kinds[("V100M16", "V100M32")] == 163


@needs_traces
def test_alibaba_node_lists() -> None:
    gpu_nodes = load_alibaba_nodes(GPU_NODES)
    all_nodes = load_alibaba_nodes(ALL_NODES)
    assert len(gpu_nodes) == 1_213
    assert len(all_nodes) == 1_523
    assert sum(len(node.gpus) for node in gpu_nodes) == 6_212
    assert sum(len(node.gpus) for node in all_nodes) == 6_212
    assert all(node.gpus for node in gpu_nodes)
    assert sum(not node.gpus for node in all_nodes) == 310
    models = Counter(gpu.model for node in all_nodes for gpu in node.gpus)
    assert models == {
        "G2": 4_392,
        "T4": 842,
        "G3": 312,
        "P100": 265,
        "V100M32": 204,
        "V100M16": 195,
        "A10": 2,
    }
    first = gpu_nodes[0]  # openb-node-0000,64000,262144,2,P100
    assert (first.name, first.cpus, first.memory_bytes) == ("openb-node-0000", 64.0, 256 * GiB)
    assert [(gpu.uuid, gpu.index, gpu.model) for gpu in first.gpus] == [
        ("openb-node-0000-gpu0", 0, "P100"),
        ("openb-node-0000-gpu1", 1, "P100"),
    ]
    assert {gpu.memory_bytes for gpu in first.gpus} == {16 * GiB}
    memory = {gpu.model: gpu.memory_bytes for node in all_nodes for gpu in node.gpus}
    assert memory == {model: GPU_MEMORY_BYTES[model] for model in models}
    assert memory["V100M32"] == 32 * GiB and memory["A10"] == 24 * GiB
    with_nodes = load_alibaba(PODS, ALL_NODES)
    assert with_nodes.nodes == all_nodes


@needs_traces
def test_alibaba_multigpu_list_loads_as_tasks_without_times() -> None:
    trace = load_alibaba(OPENB / "openb_pod_list_multigpu50.csv", GPU_NODES)
    assert (len(trace.jobs), trace.skipped, trace.timed) == (9061, 0, False)
    assert [job.job_id for job in trace.jobs] == list(range(1, 9062)), "file order"
    assert {(job.submit, job.duration) for job in trace.jobs} == {(0.0, UNTIMED_DURATION)}
    assert trace.teams() == (ALIBABA_DEFAULT_TEAM,)
    counts = Counter(job.request.gpu_count for job in trace.jobs if job.request.gpus)
    assert {gpus: counts[gpus] for gpus in (2, 4, 8)} == {2: 222, 4: 206, 8: 556}
    second = trace.jobs[1]  # openb-pod-0001,6000,12288,1,460
    assert (second.request.gpus, second.request.cpus) == (0.46, 6.0)
    assert len(trace.nodes) == 1213


# --------------------------------------------------------------------------- Alibaba, small


def test_alibaba_small_pod_and_node_lists(tmp_path: Path) -> None:
    pods = write(
        tmp_path,
        "pods.csv",
        PODS_HEADER
        + "p0,4000,1024,0,0,,BE,Running,100,400,110\n"
        + "p1,500,0,2,1000,A10|T4,LS,Running,50,60,60\n"
        + "p2,1000,512,1,1000,,LS,Failed,10,200,\n",
    )
    nodes = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,2048,2,T4\n")
    trace = load_alibaba(pods, nodes)
    # p2 never scheduled: deletion - creation; p1 deleted when scheduled: the same.
    assert [(job.job_id, job.submit, job.duration) for job in trace.jobs] == [
        (3, 0.0, 190.0),
        (2, 40.0, 10.0),
        (1, 90.0, 290.0),
    ]
    assert trace.skipped == 0
    cpu_only = next(job for job in trace.jobs if job.job_id == 1).request
    assert (cpu_only.gpus, cpu_only.cpus, cpu_only.memory_bytes) == (None, 4.0, 1024 * MiB)
    assert next(job for job in trace.jobs if job.job_id == 2).gpu_types == ("A10", "T4")
    assert [gpu.uuid for gpu in trace.nodes[0].gpus] == ["n0-gpu0", "n0-gpu1"]
    unknown = write(tmp_path, "bad.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,2048,1,X9\n")
    with pytest.raises(ValueError, match="line 2: GPU model 'X9' has no known memory"):
        load_alibaba_nodes(unknown)
    zero = write(tmp_path, "zero.csv", PODS_HEADER + "p0,0,1,1,500,,LS,Running,0,10,0\n")
    with pytest.raises(ValueError, match="line 2: cpus"):
        load_alibaba(zero)


def test_alibaba_needs_only_the_columns_it_uses(tmp_path: Path) -> None:
    bare = write(tmp_path, "bare.csv", "num_gpu,gpu_milli,cpu_milli,memory_mib\n2,1000,500,0\n")
    trace = load_alibaba(bare)
    assert (trace.timed, trace.jobs[0].team, trace.jobs[0].request.gpus) == (
        False,
        ALIBABA_DEFAULT_TEAM,
        2,
    )
    timed = write(
        tmp_path,
        "timed.csv",
        "cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n1000,0,1,250,5,65\n",
    )
    job = load_alibaba(timed).jobs[0]
    assert (job.submit, job.duration, job.team) == (0.0, 60.0, ALIBABA_DEFAULT_TEAM)
    half = write(tmp_path, "half.csv", "cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\n")
    with pytest.raises(ValueError, match="has creation_time but not deletion_time"):
        load_alibaba(half)
    with pytest.raises(ValueError, match="lacks the column\\(s\\) gpu_milli"):
        load_alibaba(write(tmp_path, "no.csv", "cpu_milli,memory_mib,num_gpu\n1,1,1\n"))


# ---------------------------------------------------------------------------------- generic


GENERIC = (
    "submit,duration,gpus,team,user,cpus,memory,gpu_memory,gpu_type\n"
    "1000,60,1,vision,ann,4,20GiB,,A100|H100\n"
    "900,30,0.25,nlp,,,,8GiB,\n"
    "1100,5,,vision,bob,2,512MiB,,\n"
    "1000,10,8,nlp,carl,32,,,\n"
)


def test_generic_csv(tmp_path: Path) -> None:
    trace = load_generic(write(tmp_path, "jobs.csv", GENERIC))
    assert trace.name == "csv:jobs.csv"
    assert [(job.job_id, job.submit) for job in trace.jobs] == [
        (2, 0.0),
        (1, 100.0),
        (4, 100.0),
        (3, 200.0),
    ]
    first, second, third, fourth = (
        next(j for j in trace.jobs if j.job_id == i) for i in range(1, 5)
    )
    assert (first.team, first.user, first.duration) == ("vision", "ann", 60.0)
    assert first.request.memory_bytes == 20 * GiB
    assert first.gpu_types == ("A100", "H100")
    assert (second.user, second.request.gpus, second.request.cpus) == ("nlp", 0.25, 1.0)
    assert second.request.gpu_memory_bytes == 8 * GiB
    assert (third.request.gpus, third.request.memory_bytes) == (None, 512 * MiB)
    assert (fourth.request.gpus, fourth.request.cpus) == (8.0, 32.0)
    assert trace.teams() == ("nlp", "vision")
    assert trace.offered_gpu_seconds() == 60 + 0.25 * 30 + 8 * 10
    assert trace.span() == 200.0 and trace.origin is None and trace.nodes == ()


def test_generic_csv_needs_only_four_columns(tmp_path: Path) -> None:
    trace = load_generic(write(tmp_path, "jobs.csv", "team,gpus,duration,submit\nx,2,1.5,7\n"))
    (job,) = trace.jobs
    assert (job.submit, job.duration, job.team, job.user, job.request.gpus) == (
        0.0,
        1.5,
        "x",
        "x",
        2.0,
    )


def test_generic_csv_censored_rows_and_observed_jcts(tmp_path: Path) -> None:
    text = "submit,duration,gpus,team,censored,jct\n0,60,1,a,,90\n5,600,1,a,1,\n9,30,1,a,0,\n"
    first, running, untold = load_generic(write(tmp_path, "history.csv", text)).jobs
    assert (first.censored, first.observed_jct) == (False, 90.0)
    assert (running.censored, running.observed_jct, running.duration) == (True, None, 600.0)
    assert (untold.censored, untold.observed_jct) == (False, None)
    bad = write(tmp_path, "bad.csv", "submit,duration,gpus,team,censored\n0,60,1,a,yes\n")
    with pytest.raises(ValueError, match="line 2: censored 'yes' must be 1"):
        load_generic(bad)
    short = write(tmp_path, "short.csv", "submit,duration,gpus,team,jct\n0,60,1,a,30\n")
    with pytest.raises(ValueError, match="line 2: jct 30 is shorter than the duration 60"):
        load_generic(short)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("soon,1,1,a", "line 3: submit 'soon' is not a number"),
        ("1,0,1,a", "line 3: duration 0 must be more than 0 seconds"),
        ("1,-5,1,a", "line 3: duration -5"),
        ("1,1,1.5,a", "line 3: gpus: .*whole number"),
        ("1,1,-1,a", "line 3: gpus -1 must be 0 or more"),
        ("1,1,nan,a", "line 3: gpus 'nan' is not a finite number"),
        ("1,1,1,", "line 3: team is empty"),
        ("1,1,1", "line 3: 3 fields, the header has 4"),
    ],
)
def test_generic_bad_rows_name_their_line(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "jobs.csv", f"submit,duration,gpus,team\n0,1,1,a\n{row}\n")
    with pytest.raises(ValueError, match=message):
        load_generic(path)


def test_generic_bad_memory_and_columns(tmp_path: Path) -> None:
    memory = write(tmp_path, "m.csv", "submit,duration,gpus,team,memory\n0,1,1,a,20 parsecs\n")
    with pytest.raises(ValueError, match="line 2: '20 parsecs' is not a byte quantity"):
        load_generic(memory)
    extra = write(tmp_path, "e.csv", "submit,duration,gpus,team,colour\n0,1,1,a,red\n")
    with pytest.raises(ValueError, match="unknown column.*colour"):
        load_generic(extra)
    missing = write(tmp_path, "x.csv", "submit,duration,team\n0,1,a\n")
    with pytest.raises(ValueError, match="lacks the column.*gpus"):
        load_generic(missing)


# --------------------------------------------------------------------------------- load_trace


def test_load_trace_dispatches_on_prefix_and_header(tmp_path: Path) -> None:
    generic = write(tmp_path, "jobs.csv", GENERIC)
    assert len(load_trace(f"csv:{generic}").jobs) == 4
    assert len(load_trace(str(generic)).jobs) == 4
    philly = write(tmp_path, "p.csv", PHILLY_HEADER + "2017-10-01 00:00:00,5.0,1,5.0,a\n")
    assert load_trace(str(philly)).name == "philly:p.csv"
    with pytest.raises(ValueError, match="has no team b; its teams .*: a$"):
        load_trace(f"philly:{philly}?teams=b")
    assert load_trace(f"philly:{philly}?teams=a&start=2017-10-02").jobs == ()
    assert len(load_trace(f"philly:{philly}?teams=a&start=2017-10-01&limit=5").jobs) == 1
    pods = write(tmp_path, "pods.csv", PODS_HEADER + "p0,1000,1,1,500,,LS,Running,0,10,0\n")
    nodes = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,2048,1,T4\n")
    trace = load_trace(f"alibaba:{pods}?nodes={nodes}")
    assert len(trace.jobs) == 1 and len(trace.nodes) == 1
    assert load_trace(str(pods)).nodes == ()


@needs_traces
def test_load_trace_tiresias_spec() -> None:
    trace = load_trace(f"philly:{PHILLY}?teams=11cb48&start=2017-10-01&end=2017-11-01")
    assert len(trace.jobs) == 6_134


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("slurm:jobs.csv", "unknown trace format 'slurm'"),
        ("csv:", "names no file"),
        ("csv:{tmp}/absent.csv", "generic trace file .*absent.csv does not exist"),
        ("{tmp}/absent.csv", "trace file .*absent.csv does not exist"),
        ("philly:{tmp}/absent.csv", "Philly trace file .*absent.csv does not exist"),
        ("philly:{tmp}/p.csv?team=a", r"unknown option\(s\) team"),
        ("philly:{tmp}/p.csv?limit=ten", "limit=ten is not a whole number"),
        ("philly:{tmp}/p.csv?start=October", "start=October is not a date"),
        ("philly:{tmp}/p.csv?limit=1&limit=2", "limit given more than once"),
        ("philly:{tmp}/p.csv?limit", "options must look like"),
        ("alibaba:{tmp}/pods.csv?node={tmp}/nodes.csv", r"unknown option\(s\) node"),
        ("csv:{tmp}/jobs.csv?limit=1", r"unknown option\(s\) limit \(known: none\)"),
        ("{tmp}/nodes.csv", "is an Alibaba node list: use alibaba:PODS\\?nodes="),
        ("{tmp}/other.csv", "cannot tell the trace format"),
        ("csv:{tmp}/p.csv", "not a valid generic trace file"),
    ],
)
def test_load_trace_errors(tmp_path: Path, spec: str, message: str) -> None:
    write(tmp_path, "p.csv", PHILLY_HEADER + "2017-10-01 00:00:00,5.0,1,5.0,a\n")
    write(tmp_path, "pods.csv", PODS_HEADER)
    write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n")
    write(tmp_path, "jobs.csv", GENERIC)
    write(tmp_path, "other.csv", "a,b\n1,2\n")
    with pytest.raises(ValueError, match=message):
        load_trace(spec.format(tmp=tmp_path))


def test_empty_trace_helpers() -> None:
    empty = Trace("empty", ())
    assert (empty.teams(), empty.offered_gpu_seconds(), empty.span()) == ((), 0.0, 0.0)
