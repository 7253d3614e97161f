"""One scheduling cycle at scale: 1,000 nodes x 8 GPUs, 10,000 pending jobs.

The pool is partly busy (running jobs hold about half the GPUs, some of them as shares), and
the queue holds jobs of 50 users in 10 teams with guarantees: 1, 2, 4 and 8 GPUs and
fractions. The scheduler is a pure function, so each of the timed cycles decides from the
same snapshot. Baselines in the same run: the ``fifo`` policy on the same snapshot, the
product policy without explanations (the simulator's setting), and that with best-fit
packing instead of the fragmentation-aware default, and that with every job fetching one of
three datasets (each node holding one: placement's locality at work). Then the cycle after
it, with its decisions applied (the server's next tick: few placements, the queue still
long), over the free capacity kept from the cycle before (as the server's cycles run) and,
as a baseline, over one built anew.

Last, the server's cycles (``Settings.cycle_max_starts`` / ``cycle_max_tries``): the burst's
cycle from the same snapshot, handing its jobs over that many at a time as it goes (the
server starts them meanwhile), then cycles half a second apart, each with the decisions of
the one before applied and nothing new (nothing ends: the queue still long). Jobs that could
not start are parked until something they wait on changes (``scheduler.parking``); as a
baseline, the same cycles with every job tried each cycle, which must decide the same. The
server explains the jobs left pending at most once a second
(``Settings.explain_interval_seconds``): the cycles between decide only, and the cycle that
explains is timed apart.

With ``--apart``, that cycle with nothing new is taken apart: its cost with no job pending,
with one, with no victims to search for, and with one try a user, beside the server's.

    python benchmarks/scheduler_scale.py [--cycles 20] [--server-only] [--apart] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness import percentile

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import GiB
from gpupool.scheduler import SchedulerState, schedule
from gpupool.scheduler.cycle import Cycle
from gpupool.scheduler.parking import Parking
from gpupool.scheduler.types import (
    ANY_MODEL,
    Allocation,
    Decisions,
    GpuCapacity,
    GpuShare,
    NodeCapacity,
    PendingJob,
    Snapshot,
    TeamQuota,
    Want,
)
from gpupool.settings import Settings
from gpupool.sim.engine import VirtualClock
from gpupool.sim.policies import named

NODES, GPUS_PER_NODE, PENDING, USERS, TEAMS = 1000, 8, 10_000, 50, 10
BUSY = 0.5  # share of the GPUs running jobs hold
SIZES = (0.25, 0.5, 1, 1, 1, 1, 2, 2, 4, 8)  # pending jobs' GPUs: a mix, some fractional
GUARANTEE = 300.0  # GPUs per team: 3,000 of 8,000 guaranteed
NOW = 1_000_000.0
AIM_P95, AIM_RATE = 0.050, 2000.0


def build_snapshot(policy: Policy, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    nodes = tuple(_node(index) for index in range(NODES))
    teams = [f"team-{index}" for index in range(TEAMS)]
    users = [(teams[index % TEAMS], f"user-{index}") for index in range(USERS)]
    allocations = _running(nodes, users, rng)
    pending = tuple(_pending(job_id, users, rng) for job_id in range(1, PENDING + 1))
    quotas = tuple(TeamQuota(team, {ANY_MODEL: GUARANTEE}) for team in teams)
    usage = {user: rng.uniform(0, 5e5) for _, user in users}
    return Snapshot(nodes, allocations, pending, quotas=quotas, usage=usage, policy=policy)


def _node(index: int) -> NodeCapacity:
    name = f"node-{index:04d}"
    gpus = tuple(
        GpuCapacity(f"GPU-{name}-{gpu}", gpu, "A100", 80 * GiB, domain=gpu // 4)
        for gpu in range(GPUS_PER_NODE)
    )
    return NodeCapacity(name, gpus, 128.0, 1024 * GiB)


def _running(
    nodes: tuple[NodeCapacity, ...], users: list[tuple[str, str]], rng: random.Random
) -> tuple[Allocation, ...]:
    """Running jobs on about ``BUSY`` of the GPUs (0 to 8 per node): whole GPUs and halves,
    most in their first least-attained-service level, a quarter past the second."""
    allocations: list[Allocation] = []
    job_id = 100_000
    for node in nodes:
        for gpu in node.gpus[: rng.randint(0, round(2 * BUSY * GPUS_PER_NODE))]:
            team, user = rng.choice(users)
            job_id += 1
            if rng.random() < 0.2:  # half a GPU, the other half free for a fraction
                share = GpuShare(gpu.uuid, 0.5, gpu.memory_bytes // 2)
            else:
                share = GpuShare(gpu.uuid, 1.0, gpu.memory_bytes)
            allocations.append(
                Allocation(
                    job_id,
                    node.name,
                    (share,),
                    4.0,
                    16 * GiB,
                    team=team,
                    user=user,
                    started_at=NOW - rng.uniform(60, 1_800),
                    attained=rng.choice((0.0, 0.0, 0.0, 5e4)),
                )
            )
    return tuple(allocations)


def _pending(job_id: int, users: list[tuple[str, str]], rng: random.Random) -> PendingJob:
    team, user = rng.choice(users)
    gpus = rng.choice(SIZES)
    request = ResourceRequest(gpus=gpus, cpus=4.0 * max(1.0, gpus), memory_bytes=16 * GiB)
    submitted = NOW - rng.uniform(0, 86_400)
    return PendingJob(
        job_id,
        team,
        user,
        rng.choice((0, 0, 0, 10)),
        submitted,
        request,
        attained=rng.choice((0.0, 0.0, 5e3, 5e4)),
    )


def with_datasets(snapshot: Snapshot) -> Snapshot:
    """The snapshot with three datasets (100, 200 and 500 GB): a user's jobs fetch one (by the
    user's number), and each node holds one (by its number)."""
    keys = [Want(f"dataset:{index}", size * 10**9) for index, size in enumerate((100, 200, 500))]
    nodes = tuple(
        replace(node, holds=frozenset({keys[index % 3].key}))
        for index, node in enumerate(snapshot.nodes)
    )
    pending = tuple(
        replace(job, wants=(keys[int(job.user.rsplit("-", 1)[1]) % 3],)) for job in snapshot.pending
    )
    return replace(snapshot, nodes=nodes, pending=pending)


Timing = tuple[list[float], list[float]]  # wall and CPU seconds per cycle


def built_anew(snapshot: Snapshot, clock: VirtualClock, state: SchedulerState) -> Decisions:
    """A cycle that builds its free capacity, queues and running jobs, instead of taking
    those kept from the cycle before (the state's per-object memos it still reads)."""
    return Cycle(snapshot, clock.now(), state=state).run()


def time_cycles(
    snapshot: Snapshot,
    cycles: int,
    state: SchedulerState,
    decide: Callable[..., Decisions] = schedule,
) -> tuple[Timing, Decisions]:
    """``cycles`` cycles with ``state``, as one owner's (the server's) cycles run."""
    clock = VirtualClock(NOW)
    decide(snapshot, clock, state)  # warm caches (imports, first allocations)
    wall, cpu = [], []
    decisions = Decisions()
    for _ in range(cycles):
        began, began_cpu = time.perf_counter(), time.process_time()
        decisions = decide(snapshot, clock, state)
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    return (wall, cpu), decisions


def line(label: str, timing: Timing, decisions: Decisions) -> tuple[float, float]:
    """Wall-clock p50 and p95 (CPU time beside: the machine may be shared), placements/s."""
    wall, cpu = timing
    p50, p95 = percentile(wall, 50), percentile(wall, 95)
    rate = len(decisions.placements) / statistics.median(wall)
    print(
        f"  {label:<42} p50 {p50 * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   "
        f"(CPU p50 {percentile(cpu, 50) * 1000:7.1f} ms)   {len(decisions.placements):5d} "
        f"placements, {len(decisions.preemptions):4d} preemptions, {len(decisions.pending):5d} "
        f"explained   {rate:7.0f} placements/s"
    )
    return p95, rate


def applied(snapshot: Snapshot, decisions: Decisions) -> Snapshot:
    """The snapshot of the next cycle: the placed jobs run, the preempted ones are stopping,
    the nominations stand (what the server's next tick sees, nothing having ended)."""
    jobs = {job.job_id: job for job in snapshot.pending}
    preempted = {preemption.job_id for preemption in decisions.preemptions}
    allocations = [
        replace(allocation, stopping=True) if allocation.job_id in preempted else allocation
        for allocation in snapshot.allocations
    ]
    by_job: dict[int, list] = {}
    for placement in decisions.placements:
        by_job.setdefault(placement.job_id, []).append(placement)
    for job_id, placements in by_job.items():
        allocations.extend(jobs[job_id].started(placements, NOW))
    pending = tuple(job for job in snapshot.pending if job.job_id not in by_job)
    return replace(
        snapshot,
        allocations=tuple(allocations),
        pending=pending,
        nominations=dict(decisions.nominations),
    )


@dataclass
class ServerRun:
    """The server's cycles (``server_cycles``): the burst's, the gaps between its hand-overs,
    and those with nothing new; wall seconds."""

    burst: float = 0.0
    burst_cpu: float = 0.0
    gaps: list[float] = field(default_factory=list)  # cycle start or last hand-over -> next
    placed: int = 0
    preempted: int = 0
    steady: list[float] = field(default_factory=list)
    steady_cpu: list[float] = field(default_factory=list)
    steady_starts: list[int] = field(default_factory=list)  # placements and preemptions


def server_cycles(
    snapshot: Snapshot, steady: int, state: SchedulerState
) -> tuple[ServerRun, Snapshot]:
    """The server's deciding cycles from ``snapshot`` (its policy bounded; explaining
    nothing, as between its explaining ones): the burst, handing its jobs over
    ``max_starts`` at a time, then ``steady`` cycles, each with the decisions of the one
    before applied and nothing new (nothing ends), half a second apart (the server's
    ``schedule_interval_seconds``). Their times, and the snapshot after the burst."""
    clock = VirtualClock(NOW)
    schedule(snapshot, clock, state)  # the kept state, as the tick before left it
    quiet = replace(snapshot, explain=False)
    run = ServerRun()
    marks: list[float] = []
    parts: list[Decisions] = []

    def hand_over(part: Decisions) -> None:
        marks.append(time.perf_counter())
        parts.append(part)

    began, began_cpu = time.perf_counter(), time.process_time()
    rest = schedule(quiet, clock, state, hand_over)
    run.burst, run.burst_cpu = time.perf_counter() - began, time.process_time() - began_cpu
    ends = [began, *marks, began + run.burst]
    run.gaps = [later - earlier for earlier, later in zip(ends, ends[1:], strict=False)]
    whole = Decisions(
        [p for part in [*parts, rest] for p in part.placements],
        preemptions=[p for part in [*parts, rest] for p in part.preemptions],
        nominations=rest.nominations,
    )
    run.placed = len({placement.job_id for placement in whole.placements})
    run.preempted = len(whole.preemptions)
    after = current = applied(quiet, whole)
    for _ in range(steady):
        clock.advance_to(clock.now() + Settings().schedule_interval_seconds)
        began, began_cpu = time.perf_counter(), time.process_time()
        decisions = schedule(current, clock, state)
        run.steady.append(time.perf_counter() - began)
        run.steady_cpu.append(time.process_time() - began_cpu)
        run.steady_starts.append(len(decisions.placements) + len(decisions.preemptions))
        current = applied(current, decisions)
    return run, replace(after, explain=True)


def baselines(product: Snapshot, cycles: int, state: SchedulerState) -> None:
    """One cycle placing the whole burst, the baselines beside it, and the next cycle."""
    fifo_times, fifo = time_cycles(replace(product, policy=named("fifo")), cycles, state)
    line("baseline: fifo, no explanations", fifo_times, fifo)
    quiet_times, quiet = time_cycles(replace(product, policy=named("default")), cycles, state)
    line("baseline: default, no explanations", quiet_times, quiet)
    packed = replace(named("default"), packing="best-fit")
    best_fit_times, best_fit = time_cycles(replace(product, policy=packed), cycles, state)
    line("baseline: the same, best-fit packing", best_fit_times, best_fit)
    local = with_datasets(replace(product, policy=named("default")))
    local_times, local_decisions = time_cycles(local, cycles, state)
    line("the same, every job with a dataset", local_times, local_decisions)
    times, decisions = time_cycles(product, cycles, state)
    p95, rate = line("one cycle, the whole burst (no bound)", times, decisions)
    after = applied(product, decisions)
    anew_times, anew_decisions = time_cycles(after, cycles, state, built_anew)
    line("baseline: the next cycle, nothing kept", anew_times, anew_decisions)
    next_times, next_decisions = time_cycles(after, cycles, state)
    line("the next cycle, these decisions applied", next_times, next_decisions)
    median = statistics.median(times[0])
    print(
        f"  ratio default / fifo: {median / statistics.median(fifo_times[0]):.2f}   "
        "default / default without explanations: "
        f"{median / statistics.median(quiet_times[0]):.2f}   fragmentation-aware / best-fit "
        f"packing (no explanations): "
        f"{statistics.median(quiet_times[0]) / statistics.median(best_fit_times[0]):.2f}   "
        "with datasets / without (locality): "
        f"{statistics.median(local_times[0]) / statistics.median(quiet_times[0]):.2f}   "
        "next cycle, kept / built anew: "
        f"{statistics.median(next_times[0]) / statistics.median(anew_times[0]):.2f}"
    )
    print(
        f"  one cycle placing the whole burst: p95 < {AIM_P95 * 1000:.0f} ms "
        f"({'met' if p95 < AIM_P95 else 'NOT met'}), >= {AIM_RATE:,.0f} placements/s "
        f"({'met' if rate >= AIM_RATE else 'NOT met'})"
    )


def taken_apart(after: Snapshot, cycles: int, state: SchedulerState) -> None:
    """The server's cycle after the burst (deciding only), taken apart: with no job to try,
    one, no victims to search for, one try a user, then as the server runs it."""
    quiet = replace(after, explain=False)
    server = quiet.policy
    rows = [
        ("no job pending", replace(quiet, pending=(), nominations={})),
        ("one job pending", replace(quiet, pending=quiet.pending[:1])),
        (
            "no preemption",
            replace(quiet, policy=replace(server, reclaim=False, las_preemption=False)),
        ),
        ("1 try a user", replace(quiet, policy=replace(server, max_tries=1))),
        (f"{server.max_tries} tries a user (the server's)", quiet),
    ]
    print("  the next cycle taken apart, deciding only")
    for label, snapshot in rows:
        line(f"  {label}", *time_cycles(snapshot, cycles, state))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="cProfile one product cycle")
    parser.add_argument(
        "--server-only", action="store_true", help="the server's bounded cycles alone"
    )
    parser.add_argument(
        "--apart", action="store_true", help="then the server's next cycle, taken apart"
    )
    args = parser.parse_args()
    print(
        f"one scheduling cycle: {NODES} nodes x {GPUS_PER_NODE} GPUs, {PENDING} pending jobs "
        f"of {USERS} users in {TEAMS} teams (guarantee {GUARANTEE:g} GPUs each), "
        f"{args.cycles} cycles each"
    )
    product = build_snapshot(DEFAULT_POLICY)
    running = sum(part.share for a in product.allocations for part in a.gpus)
    print(f"  busy: {len(product.allocations)} running tasks hold {running:g} GPUs")
    state = SchedulerState()  # the benchmark's cycles keep one state, as the server's do
    if not args.server_only:
        baselines(product, args.cycles, state)
    server = Settings().policy()
    bounded = replace(product, policy=server)
    run, after = server_cycles(bounded, args.cycles, state)
    tried, _ = server_cycles(bounded, args.cycles, SchedulerState(parking=Parking(enabled=False)))
    rate = run.placed / run.burst
    gap95, steady95 = percentile(run.gaps, 95), percentile(run.steady, 95)
    print(
        f"  gpupool: the server's cycles ({server.max_starts} starts handed over at a time, "
        f"{server.max_tries} tries a user), deciding only\n"
        f"  {'the burst':<42} {run.burst * 1000:7.1f} ms   (CPU {run.burst_cpu * 1000:.1f} ms)"
        f"   {run.placed} placements, {run.preempted} preemptions: {rate:7.0f} placements/s\n"
        f"  {'  handed over every':<42} p50 {percentile(run.gaps, 50) * 1000:7.1f} ms   p95 "
        f"{gap95 * 1000:7.1f} ms   max {max(run.gaps) * 1000:7.1f} ms   ({len(run.gaps)} parts)\n"
        f"  {'the next cycles (nothing new)':<42} p50 "
        f"{percentile(run.steady, 50) * 1000:7.1f} ms   p95 {steady95 * 1000:7.1f} ms   (CPU "
        f"p50 {percentile(run.steady_cpu, 50) * 1000:7.1f} ms)   starts and preemptions: "
        f"{' '.join(str(n) for n in run.steady_starts[:4])} then "
        f"{sum(run.steady_starts[4:])}\n"
        f"  {'  baseline: every job tried each cycle':<42} p50 "
        f"{percentile(tried.steady, 50) * 1000:7.1f} ms   p95 "
        f"{percentile(tried.steady, 95) * 1000:7.1f} ms   (CPU p50 "
        f"{percentile(tried.steady_cpu, 50) * 1000:7.1f} ms)   parked / tried (p50): "
        f"{statistics.median(run.steady) / statistics.median(tried.steady):.2f}"
    )
    if run.steady_starts != tried.steady_starts:
        print("  DIFFERENT DECISIONS with jobs parked: a fault")
    explaining, decisions = time_cycles(after, max(3, args.cycles // 4), state)
    line("the server: a cycle that explains", explaining, decisions)
    print(
        f"  aim p95 < {AIM_P95 * 1000:.0f} ms: the burst's cycle "
        f"{'met' if run.burst < AIM_P95 else 'NOT met'}, each part handed over "
        f"{'met' if gap95 < AIM_P95 else 'NOT met'}, the next cycles "
        f"{'met' if steady95 < AIM_P95 else 'NOT met'};   >= {AIM_RATE:,.0f} placements/s "
        f"{'met' if rate >= AIM_RATE else 'NOT met'}"
    )
    if args.apart:
        taken_apart(after, max(3, args.cycles // 4), state)
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(schedule, product, VirtualClock(NOW), state)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    sys.exit(main())
