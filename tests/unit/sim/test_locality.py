"""Datasets in the simulator (``sim.datasets``): what jobs fetch, the nodes' caches, and the
study of placement that prefers nodes holding a job's data (``Policy.locality``)."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from gpupool.main import app
from gpupool.scheduler.types import Want
from gpupool.sim.datasets import GB, Datasets, NodeCaches
from gpupool.sim.engine import cluster, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.policies import named
from gpupool.sim.traces import TraceJob, load_trace
from tests.conftest import REPO
from tests.support.traces import job

PHILLY = REPO.parent / "shared" / "data" / "traces" / "philly.csv"
BEST_FIT = named("best-fit")
EXAMPLE = REPO / "examples" / "trace.csv"


def users_of(datasets: Datasets) -> list[str]:
    """A user whose jobs use each dataset, in the datasets' order."""
    found: dict[int, str] = {}
    for index in range(1000):
        found.setdefault(datasets.index_of(f"user-{index}"), f"user-{index}")
    return [found[index] for index in range(len(datasets.sizes))]


# -- the engine's accounting on a hand-made case ------------------------------------------------

# two nodes of two GPUs; dataset 0 is 100 GB, dataset 1 10 GB, fetched at 1 GB/s
TWO = Datasets((100 * GB, 10 * GB), cache_bytes=1000 * GB, bandwidth=1.0 * GB)
P, Q = users_of(TWO)


def hand_made() -> list[TraceJob]:
    return [
        job(1, 0.0, 10.0, 2, user=P),  # node-000 (first by name): fetches 100 GB, 100 s
        job(2, 0.0, 10_000.0, 1, user=Q),  # node-001: fetches 10 GB, 10 s
        # at 500 s node-000 is free and holds dataset 0, node-001 has one GPU free: best fit
        # takes node-001 (and fetches 100 GB); locality takes node-000 (fetches nothing)
        job(3, 500.0, 10.0, 1, user=P),
    ]


@pytest.mark.parametrize("locality", [True, False])
def test_the_engine_counts_each_fetch_and_delays_the_work_by_it(locality: bool) -> None:
    result = simulate(
        hand_made(),
        cluster("2x2"),
        settings=replace(BEST_FIT, locality=locality),
        datasets=TWO,
    )

    records = {record.job_id: record for record in result.records}
    assert records[1].node == "node-000" and records[1].start == 0.0
    assert records[1].end == 110.0  # 100 s fetching, holding its GPUs, then 10 s of work
    assert records[2].node == "node-001" and records[2].end == 10_010.0
    if locality:
        assert records[3].node == "node-000" and records[3].end == 510.0
        assert (result.fetched_bytes, result.fetches) == (110 * GB, 2)
        assert result.fetch_wait == 110.0
    else:
        assert records[3].node == "node-001" and records[3].end == 610.0
        assert (result.fetched_bytes, result.fetches) == (210 * GB, 3)
        assert result.fetch_wait == 210.0


def test_jobs_placed_together_share_one_fetch_and_a_gang_fetches_on_each_node() -> None:
    one = Datasets((100 * GB,), cache_bytes=1000 * GB, bandwidth=1.0 * GB)
    together = [job(1, 0.0, 10.0, 1, user="u"), job(2, 0.0, 50.0, 1, user="u")]
    result = simulate(together, cluster("1x2"), settings=BEST_FIT, datasets=one)
    assert (result.fetched_bytes, result.fetches) == (100 * GB, 1)
    assert [record.end for record in result.records] == [110.0, 150.0]

    gang = [job(1, 0.0, 10.0, 2, user="u")]  # two whole one-GPU nodes
    result = simulate(gang, cluster("2x1"), settings=BEST_FIT, datasets=one)
    assert (result.fetched_bytes, result.fetches) == (200 * GB, 2)
    assert [record.end for record in result.records] == [110.0]


def test_without_datasets_nothing_is_fetched_and_the_replay_is_as_before() -> None:
    result = simulate(hand_made(), cluster("2x2"), settings=BEST_FIT)
    assert (result.fetched_bytes, result.fetches, result.fetch_wait) == (0, 0, 0.0)
    assert [record.end for record in result.records] == [10.0, 10_000.0, 510.0]


def test_a_nodes_cache_lets_the_least_recently_used_go_but_never_one_in_use() -> None:
    caches = NodeCaches(Datasets((1,), cache_bytes=100 * GB, bandwidth=1.0 * GB))
    big, small, other = Want("dataset:a", 80 * GB), Want("dataset:b", 30 * GB), Want("c", 10)

    assert caches.use("n", big, 0.0) == 80.0
    assert caches.use("n", small, 0.0) == 30.0  # past 100 GB, but both are in use
    assert caches.holds("n") == {"dataset:a", "dataset:b"}
    assert caches.use("n", big, 50.0) == 80.0  # being fetched: wait for the same fetch
    caches.release("n", big)
    caches.release("n", big)  # big is no longer used: it goes (the least recently used)
    assert caches.holds("n") == {"dataset:b"}
    caches.release("n", small)
    caches.use("n", other, 100.0)
    assert caches.holds("n") == {"dataset:b", "c"}  # 30 GB + 10 bytes: within the cache
    assert (caches.fetched_bytes, caches.fetches) == (110 * GB + 10, 3)


# -- the study -----------------------------------------------------------------------------------


def synthetic(seed: int = 3, count: int = 400) -> list[TraceJob]:
    """Jobs of twelve users on 64 GPUs at an offered load near 0.7: mostly one GPU, some 2,
    4 and 8, from ten minutes to two hours."""
    rng = random.Random(seed)
    jobs, now = [], 0.0
    for job_id in range(1, count + 1):
        gpus = rng.choice([1, 1, 1, 1, 2, 2, 4, 8])
        duration = rng.uniform(600.0, 7200.0)
        now += rng.expovariate(0.7 * 64 / (2.4 * 3900.0))
        jobs.append(job(job_id, now, duration, gpus, user=f"user-{rng.randrange(12)}"))
    return jobs


def study(jobs: list[TraceJob]) -> dict[bool, tuple[int, float]]:
    """Bytes fetched and avg JCT with locality on and off, the product's policy, 8 x 8 GPUs
    and three datasets (50, 200 and 500 GB, 500 GB cached a node)."""
    figures = {}
    for locality in (True, False):
        policy = replace(named("default"), locality=locality)
        result = simulate(jobs, cluster("8x8"), settings=policy, datasets=Datasets())
        assert not result.unscheduled
        figures[locality] = (result.fetched_bytes, summarize(result).avg_jct)
    return figures


def test_locality_fetches_fewer_bytes_on_a_synthetic_trace() -> None:
    figures = study(synthetic())
    assert figures[True][0] < figures[False][0]


@pytest.mark.skipif(not PHILLY.is_file(), reason=f"{PHILLY} is absent")
def test_locality_fetches_fewer_bytes_on_a_slice_of_philly() -> None:
    trace = load_trace(
        f"philly:{PHILLY}?teams=11cb48,103959,b436b2,ed69ec,e13805&start=2017-10-01&end=2017-10-04"
    )
    figures = study(list(trace.jobs))
    assert figures[True][0] < figures[False][0]


# -- the command ---------------------------------------------------------------------------------


def test_simulate_with_datasets_prints_the_bytes_fetched_per_policy() -> None:
    runner = CliRunner()
    args = ["simulate", "--trace", f"csv:{EXAMPLE}", "--cluster", "2x8", "--datasets", "3"]
    args += ["--policy", "default", "--policy", "default:locality=off"]

    table = runner.invoke(app, args)
    document = runner.invoke(app, [*args, "-o", "json"])

    assert table.exit_code == 0, table.output
    assert "default: fetched " in table.output
    assert "default:locality=off: fetched " in table.output
    rows = json.loads(document.stdout)["rows"]
    assert [row["policy"] for row in rows] == ["default", "default:locality=off"]
    assert all(row["fetched_bytes"] > 0 and row["fetches"] > 0 for row in rows)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--policy", "default:locality=maybe"], "is on or off"),
        (["--dataset-sizes", "5XB"], "is not a byte quantity"),
        (["--fetch-gbps", "0"], "above 0"),
    ],
)
def test_simulate_refuses_bad_dataset_options_with_a_usage_error(
    extra: list[str], says: str
) -> None:
    args = ["simulate", "--trace", f"csv:{EXAMPLE}", "--cluster", "2x8", "--datasets", "3"]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 2
    words = " ".join(result.output.replace("│", " ").split())  # the error's box, unwrapped
    assert says in words
