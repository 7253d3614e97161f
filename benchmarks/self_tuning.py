"""Self-tuning on the Philly trace: settings chosen from each team's own past against the
defaults and DLAS-GPU (``tiresias``), month by month.

For each team-month of at least 500 jobs (one team, a calendar month) with 14 days of the
trace before it, ``gpupool.sim.tuning.tune`` chooses the settings from those 14 days only
(search on the first 7, hold-out the last 7); then the month is replayed under the chosen
settings, the defaults and ``tiresias`` on the same pool. The tuner replays a policy as the
server runs it (a cycle as soon as a job crosses a level: ``tuning._replay.served``).
Columns: PAST, the jobs of the search week / of the hold-out week; DEFAULT, the default
as ``gpupool simulate`` replays it (crossings seen at the next arrival or end); SERVED, the
default as the tuner replays it; TIRESIAS; TUNED, the settings chosen (SERVED where the
tuner kept the defaults).

The pool of a team-month is the Tiresias anchor's, scaled: the anchor (team 11cb48, October
2017) ran on 4 nodes x 4 GPUs, so every team-month gets nodes of 4 GPUs, as many as give
its month the anchor's load (GPU-hours asked over the pool's GPU-hours in the month), and
at least its largest job. Replays are in the anchor's settings, Tiresias' own: count
placement, no restart cost.

Last, the time of 60 replays of a 14-day window on 2 worker processes (aim <= 10 min on 2
cores), on the 14 days before the team-month with the most jobs in them.

    python benchmarks/self_tuning.py [--trials 48] [--workers 2] [--only 11cb48-2017-10]
                                     [--placement count] [--restart-cost 0] [--no-guards]
                                     [--skip-timing] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path

from gpupool.sim.engine import cluster, simulate
from gpupool.sim.policies import named
from gpupool.sim.traces import Trace, TraceJob, load_trace
from gpupool.sim.tuning import TuneReport, apply_knobs, knobs_of, tune
from gpupool.sim.tuning._replay import ReplayTask, Setup, run_task, score, service_before
from gpupool.sim.tuning._space import grid, grid_sample

REPO = Path(__file__).resolve().parents[1]
# as benchmarks/philly_replay.py: downloaded into the checkout, else the traces beside it
TRACES = (REPO / "traces" / "philly.csv", REPO.parent / "shared" / "data" / "traces" / "philly.csv")
MIN_JOBS = 500
DAY = 86400.0
HISTORY = 14 * DAY  # the past a month's settings are chosen from
HOLDOUT = 7 * DAY  # its last days, the hold-out
ANCHOR = ("11cb48", "2017-10", 16)  # the Tiresias subset: team, month, GPUs
GPUS_PER_NODE = 4
TIMED_REPLAYS = 60
TIMING_AIM = 600.0


@dataclass(frozen=True)
class TeamMonth:
    team: str
    month: str  # YYYY-MM
    start: float  # trace seconds
    end: float
    jobs: tuple[TraceJob, ...]
    history: tuple[TraceJob, ...]  # the team's jobs of the HISTORY before ``start``

    @property
    def name(self) -> str:
        return f"{self.team}-{self.month}"

    def gpu_hours(self) -> float:
        return sum(job.request.gpu_count * job.duration for job in self.jobs) / 3600


@dataclass(frozen=True)
class Row:
    month: TeamMonth
    gpus: int
    default: float
    served: float
    tiresias: float
    tuned: float
    report: TuneReport
    seconds: float


def main() -> None:
    args = _arguments()
    if not args.trace.is_file():
        print(f"skipped: {args.trace} is absent (docs/scheduling.md: where to download it)")
        return
    trace = load_trace(f"philly:{args.trace}")
    months = team_months(trace)
    load = anchor_load(months)
    print(
        f"Philly: {len(trace.jobs)} jobs; {len(months)} team-months of >= {MIN_JOBS} jobs with "
        f"14 days before them; pools at the anchor's load ({100 * load:.1f} % of the month)"
    )
    chosen = [m for m in months if not args.only or m.name in args.only]
    print(HEADER)
    rows = [run_month(month, pool_gpus(month, load), args) for month in chosen]
    print_table(rows)
    if not args.skip_timing and months:
        time_replays(max(months, key=lambda m: len(m.history)), pool_gpus, load, args)
    if args.json:
        args.json.write_text(json.dumps([row_dict(row) for row in rows], indent=1))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    found = next((path for path in TRACES if path.is_file()), TRACES[0])
    parser.add_argument("--trace", type=Path, default=found, help=f"the Philly CSV ({found})")
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sampler", default="tpe", choices=("tpe", "grid"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", help="team-months by name: 11cb48-2017-10")
    parser.add_argument("--placement", default="count", choices=("count", "node"))
    parser.add_argument("--restart-cost", type=float, default=0.0)
    parser.add_argument("--no-guards", action="store_true", help="adopt on avg JCT alone")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--json", type=Path, help="write every row and report here")
    return parser.parse_args()


def team_months(trace: Trace) -> list[TeamMonth]:
    """The team-months of at least MIN_JOBS jobs that have HISTORY of the trace before."""
    origin = trace.origin or datetime(1970, 1, 1, tzinfo=UTC)
    by_month: dict[tuple[str, str], list[TraceJob]] = {}
    for job in trace.jobs:
        month = datetime.fromtimestamp(origin.timestamp() + job.submit, UTC).strftime("%Y-%m")
        by_month.setdefault((job.team, month), []).append(job)
    months = []
    for (team, month), jobs in sorted(by_month.items()):
        start, end = _month_bounds(month, origin)
        if len(jobs) < MIN_JOBS or start - HISTORY < 0:
            continue
        history = tuple(
            job for job in trace.jobs if job.team == team and start - HISTORY <= job.submit < start
        )
        months.append(TeamMonth(team, month, start, end, tuple(jobs), history))
    return months


def _month_bounds(month: str, origin: datetime) -> tuple[float, float]:
    year, number = (int(part) for part in month.split("-"))
    first = datetime(year, number, 1, tzinfo=UTC)
    following = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return first.timestamp() - origin.timestamp(), following.timestamp() - origin.timestamp()


def anchor_load(months: list[TeamMonth]) -> float:
    """The anchor's GPU-hours over its pool's GPU-hours in its month."""
    team, month, gpus = ANCHOR
    found = next(m for m in months if (m.team, m.month) == (team, month))
    return found.gpu_hours() / (gpus * (found.end - found.start) / 3600)


def pool_gpus(month: TeamMonth, load: float) -> int:
    """Nodes of 4 GPUs: as many as give the month the anchor's load, and its largest job."""
    hours = (month.end - month.start) / 3600
    wanted = month.gpu_hours() / (load * hours)
    largest = max(job.request.gpu_count for job in month.jobs)
    return GPUS_PER_NODE * max(1, math.ceil(max(wanted, largest) / GPUS_PER_NODE))


def run_month(month: TeamMonth, gpus: int, args: argparse.Namespace) -> Row:
    """Tune on the month's past, then replay the month three ways."""
    began = time.perf_counter()
    nodes = cluster(f"{gpus // GPUS_PER_NODE}x{GPUS_PER_NODE}")
    base = named("default")
    report = tune(
        month.history,
        nodes,
        base=base,
        window=(month.start - HISTORY, month.start - HOLDOUT),
        holdout=(month.start - HOLDOUT, month.start),
        trials=args.trials,
        sampler=args.sampler,
        workers=args.workers,
        seed=args.seed,
        guards={} if args.no_guards else None,
        placement=args.placement,
        restart_cost=args.restart_cost,
    )
    setup = Setup(nodes, (), args.placement, args.restart_cost)
    history = service_before(month.history, month.start)
    policies = [base, named("tiresias")]
    if report.chosen is not None:
        policies.append(apply_knobs(base, report.chosen))
    tasks = [ReplayTask(month.jobs, policy, setup, history) for policy in policies]
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as workers:
        plain = workers.submit(simulated, tasks[0])
        served, tiresias, *tuned = (scores.avg_jct for scores in workers.map(run_task, tasks))
        default = plain.result()
    row = Row(month, gpus, default, served, tiresias, (tuned or [served])[0], report, 0.0)
    row = replace(row, seconds=time.perf_counter() - began)
    print(f"  {_line(row)}  ({row.seconds:.0f} s)", flush=True)
    return row


def simulated(task: ReplayTask) -> float:
    """The average JCT of the task's replay as ``gpupool simulate`` runs it."""
    setup = task.setup
    result = simulate(
        task.jobs,
        setup.nodes,
        restart_cost=setup.restart_cost,
        placement=setup.placement,
        settings=task.policy,
    )
    return score(result, task.jobs).avg_jct


def describe_choice(row: Row) -> str:
    report = row.report
    if report.chosen is None:
        return f"{report.decision}: {report.reason}"
    defaults = knobs_of(named("default"), multi_user=False)
    changed = {name: value for name, value in report.chosen.items() if defaults[name] != value}
    return "adopt " + ", ".join(f"{name}={_short(value)}" for name, value in changed.items())


def _short(value: object) -> str:
    if isinstance(value, list):
        return "/".join(f"{item / 3600:g}h" for item in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


HEADER = (
    f"{'TEAM-MONTH':<16}{'JOBS':>6}{'GPUS':>5}{'PAST':>10}{'DEFAULT':>9}{'SERVED':>9}"
    f"{'TIRESIAS':>9}{'TUNED':>9}{'TUNED/TIR':>10}  CHOSEN"
)


def _line(row: Row) -> str:
    ratio = row.tuned / row.tiresias if row.tiresias else math.nan
    hours = (row.default, row.served, row.tiresias, row.tuned)
    past = f"{row.report.jobs['window']}/{row.report.jobs['holdout']}"
    return (
        f"{row.month.name:<16}{len(row.month.jobs):>6}{row.gpus:>5}{past:>10}"
        + "".join(f"{value / 3600:>8.2f}h" for value in hours)
        + f"{ratio:>10.2f}  {describe_choice(row)}"
    )


def print_table(rows: list[Row]) -> None:
    print(HEADER)
    for row in rows:
        print(_line(row))
    met = sum(row.tuned <= row.tiresias for row in rows)
    print(f"tuned <= tiresias on {met} of {len(rows)} team-months (aim: all)")


def time_replays(month: TeamMonth, pool, load: float, args: argparse.Namespace) -> None:  # noqa: ANN001
    """60 replays of the 14 days before ``month`` (grid settings), on ``args.workers``."""
    nodes = cluster(f"{pool(month, load) // GPUS_PER_NODE}x{GPUS_PER_NODE}")
    setup = Setup(nodes, (), args.placement, args.restart_cost)
    base = named("default")
    points = grid_sample(grid(multi_user=False), TIMED_REPLAYS, args.seed)
    tasks = [ReplayTask(month.history, apply_knobs(base, knobs), setup) for knobs in points]
    began, cpu = time.perf_counter(), _children_cpu()
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as workers:
        list(workers.map(run_task, tasks))
    took, cpu = time.perf_counter() - began, _children_cpu() - cpu
    verdict = "met" if took <= TIMING_AIM else "NOT met"
    print(
        f"{len(tasks)} replays of a 14-day window ({month.team}'s {len(month.history)} jobs "
        f"before {month.month}, {len(nodes) * GPUS_PER_NODE} GPUs) on {args.workers} workers: "
        f"{took:.0f} s (aim <= {TIMING_AIM:.0f} s: {verdict}); the workers' CPU time "
        f"{cpu:.0f} s, {cpu / args.workers:.0f} s on {args.workers} idle cores"
    )


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (the workers, once the pool is shut):
    what the replays cost whatever else the machine runs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def row_dict(row: Row) -> dict:
    return {
        "team_month": row.month.name,
        "jobs": len(row.month.jobs),
        "gpus": row.gpus,
        "avg_jct": {
            "default": row.default,
            "served": row.served,
            "tiresias": row.tiresias,
            "tuned": row.tuned,
        },
        "report": row.report.to_dict(),
    }


if __name__ == "__main__":
    sys.exit(main())
