"""Wall time of a whole-trace replay: the Philly-derived trace (82,247 jobs, 15 teams).

The trace is replayed through the real scheduler on 64 nodes x 8 GPUs (512 GPUs for an
average demand of 374: a loaded cluster), one team per virtual cluster as
``gpupool simulate --vc`` does. Baselines in the same run: loading the trace, and the replay
under the ``fifo`` policy (the cheapest cycle the scheduler has).

    python benchmarks/philly_replay.py [--cluster 64x8] [--limit N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

from gpupool.sim.cli import vc_quotas
from gpupool.sim.engine import cluster, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.policies import named
from gpupool.sim.report import duration
from gpupool.sim.traces import load_trace

REPO = Path(__file__).resolve().parents[1]
# where the trace is looked for: downloaded into the checkout (docs/scheduling.md says from
# where), else the traces kept beside it
TRACES = (REPO / "traces" / "philly.csv", REPO.parent / "shared" / "data" / "traces" / "philly.csv")
AIM = 120.0


def replay(trace, nodes, quotas, policy: str) -> tuple[float, str]:  # noqa: ANN001
    began = time.perf_counter()
    result = simulate(trace.jobs, nodes, settings=named(policy), quotas=quotas)
    took = time.perf_counter() - began
    metrics = summarize(result)
    figures = (
        f"{result.cycles} cycles, {len(result.records)} ran, {len(result.unscheduled)} "
        f"unscheduled, avg JCT {duration(metrics.avg_jct)}, {result.preemptions} preemptions"
    )
    return took, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="64x8")
    parser.add_argument("--limit", type=int, help="replay only the first N jobs")
    parser.add_argument("--profile", action="store_true", help="cProfile the default replay")
    found = next((path for path in TRACES if path.is_file()), TRACES[0])
    parser.add_argument("--trace", type=Path, default=found, help=f"the Philly CSV ({found})")
    args = parser.parse_args()
    if not args.trace.is_file():
        print(f"skipped: {args.trace} is absent (docs/scheduling.md: where to download it)")
        return
    limit = f"?limit={args.limit}" if args.limit else ""
    began = time.perf_counter()
    trace = load_trace(f"philly:{args.trace}{limit}")
    loaded = time.perf_counter() - began
    nodes = cluster(args.cluster)
    quotas = vc_quotas(trace, nodes)
    print(f"replay of {len(trace.jobs)} Philly jobs on {args.cluster}, one VC per team")
    print(f"  baseline: load the trace                {loaded:7.1f} s")
    fifo, fifo_figures = replay(trace, nodes, quotas, "fifo")
    print(f"  baseline: replay under fifo             {fifo:7.1f} s   ({fifo_figures})")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
    took, figures = replay(trace, nodes, quotas, "default")
    print(f"  gpupool: replay under the default       {took:7.1f} s   ({figures})")
    verdict = "met" if took < AIM else "NOT met"
    if args.limit:
        verdict = "it is for the whole trace"
    print(f"  ratio default / fifo: {took / fifo:.2f}   aim: < {AIM:.0f} s ({verdict})")
    if args.profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    sys.exit(main())
