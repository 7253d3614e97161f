"""Placement that prefers nodes holding a job's data: bytes fetched and avg JCT, on and off.

The same slice of the Philly-derived trace is replayed twice through the real scheduler
(the product's policy) on an 8-node pool of 8 GPUs with three datasets (50, 200 and 500 GB;
each user's jobs use one, by a seeded hash; each node caches 500 GB of them, least recently
used out first; a node lacking a job's dataset fetches it at 10 Gbit/s before the job's work
starts, the job holding its GPUs meanwhile): once with ``Policy.locality`` on (the default),
once off, in one process. The slice: five teams (11cb48, 103959, b436b2, ed69ec, e13805)
over 1-15 October 2017, an offered load of 0.77 on 64 GPUs.

Aims (issue 25): at least 50 % fewer bytes fetched with locality than without, at no more
than 5 % avg-JCT cost.

    python benchmarks/locality.py [--teams a,b] [--start 2017-10-01] [--end 2017-10-15]
        [--cluster 8x8] [--datasets 3] [--dataset-sizes 50GB,200GB,500GB]
        [--node-cache 500GB] [--fetch-gbps 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from gpupool.domain.units import parse_bytes
from gpupool.sim.datasets import GB, Datasets
from gpupool.sim.engine import SimResult, cluster, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.policies import named
from gpupool.sim.report import duration
from gpupool.sim.traces import load_trace

REPO = Path(__file__).resolve().parents[1]
# where the trace is looked for: downloaded into the checkout (docs/scheduling.md says from
# where), else the traces kept beside it
TRACES = (REPO / "traces" / "philly.csv", REPO.parent / "shared" / "data" / "traces" / "philly.csv")
TEAMS = "11cb48,103959,b436b2,ed69ec,e13805"
AIM_BYTES, AIM_JCT = 0.50, 0.05  # fewer bytes at least; avg-JCT cost at most


def replay(trace, nodes, datasets: Datasets, locality: bool) -> tuple[SimResult, float, float]:  # noqa: ANN001
    """One replay: its result, its avg JCT and its wall time."""
    policy = replace(named("default"), locality=locality)
    began = time.perf_counter()
    result = simulate(trace.jobs, nodes, settings=policy, restart_cost=60.0, datasets=datasets)
    took = time.perf_counter() - began
    return result, summarize(result).avg_jct, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    found = next((path for path in TRACES if path.is_file()), TRACES[0])
    parser.add_argument("--trace", type=Path, default=found, help=f"the Philly CSV ({found})")
    parser.add_argument("--teams", default=TEAMS)
    parser.add_argument("--start", default="2017-10-01")
    parser.add_argument("--end", default="2017-10-15")
    parser.add_argument("--cluster", default="8x8")
    parser.add_argument("--datasets", type=int, default=3)
    parser.add_argument("--dataset-sizes", default="50GB,200GB,500GB")
    parser.add_argument("--node-cache", default="500GB")
    parser.add_argument("--fetch-gbps", type=float, default=10.0)
    args = parser.parse_args()
    if not args.trace.is_file():
        print(f"skipped: {args.trace} is absent (docs/scheduling.md: where to download it)")
        return
    sizes = [parse_bytes(part) for part in args.dataset_sizes.split(",")]
    datasets = Datasets(
        tuple(sizes[index % len(sizes)] for index in range(args.datasets)),
        parse_bytes(args.node_cache),
        args.fetch_gbps * GB / 8,
    )
    trace = load_trace(f"philly:{args.trace}?teams={args.teams}&start={args.start}&end={args.end}")
    nodes = cluster(args.cluster)
    users = sorted({job.user for job in trace.jobs})
    uses = {index: 0 for index in range(len(datasets.sizes))}
    for job in trace.jobs:
        uses[datasets.index_of(job.user)] += 1
    print(
        f"{len(trace.jobs)} Philly jobs of {len(users)} teams, {args.start} to {args.end}, on "
        f"{args.cluster}; datasets "
        + ", ".join(f"{size / GB:g} GB ({uses[i]} jobs)" for i, size in enumerate(datasets.sizes))
        + f"; node cache {datasets.cache_bytes / GB:g} GB; fetch {args.fetch_gbps:g} Gbit/s"
    )
    rows = {}
    for locality in (False, True):
        result, jct, took = replay(trace, nodes, datasets, locality)
        rows[locality] = (result, jct)
        label = "locality on " if locality else "locality off"
        print(
            f"  {label}: fetched {result.fetched_bytes / 1e12:7.2f} TB in {result.fetches:5d} "
            f"fetches, waited {result.fetch_wait / 3600:6.1f} h for data, avg JCT "
            f"{duration(jct)} ({len(result.records)} ran, {len(result.unscheduled)} "
            f"unscheduled; replayed in {took:.1f} s)"
        )
    (off, off_jct), (on, on_jct) = rows[False], rows[True]
    fewer = 1 - on.fetched_bytes / off.fetched_bytes if off.fetched_bytes else 0.0
    cost = on_jct / off_jct - 1 if off_jct else 0.0
    print(
        f"  bytes fetched: {fewer:.1%} fewer with locality (aim: >= {AIM_BYTES:.0%}, "
        f"{'met' if fewer >= AIM_BYTES else 'NOT met'})"
    )
    print(
        f"  avg JCT: {cost:+.1%} with locality (aim: <= +{AIM_JCT:.0%}, "
        f"{'met' if cost <= AIM_JCT else 'NOT met'})"
    )


if __name__ == "__main__":
    sys.exit(main())
