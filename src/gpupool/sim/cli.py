"""``gpupool simulate``: replay a trace on a made-up cluster under one or more policies.

Registered on the main ``gpupool`` app, so its module-level imports stay light (Typer only):
the trace loaders, the engine and the scheduler are imported when the command runs.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from enum import StrEnum
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from gpupool.domain.policy import Policy
    from gpupool.scheduler.types import NodeCapacity, TeamQuota
    from gpupool.sim.datasets import Datasets
    from gpupool.sim.engine import Probe, SimResult
    from gpupool.sim.fragmentation import FillReport
    from gpupool.sim.metrics import Metrics
    from gpupool.sim.progress import ProgressDisplay
    from gpupool.sim.traces import Trace


class Output(StrEnum):
    """How the report is printed (the listings of ``gpupool`` take the same ``-o``)."""

    TABLE = "table"
    JSON = "json"


POLICY_NAMES = ("default", "fifo", "drf", "srtf-oracle", "las", "best-fit", "fgd", "tiresias")
# knobs a policy spec may set (NAME:knob=value,...): numbers and choices of ``Policy``
POLICY_KNOBS = {
    "min_runtime": float,
    "starvation_factor": float,
    "starvation_min_wait": float,
    "usage_half_life": float,
    "placement_charge": float,
    "packing": ("fgd", "best-fit"),
    "max_starts": int,  # bounded cycles, as the server runs them (0: no bound)
    "max_tries": int,
    "locality": ("on", "off"),  # placement prefers nodes holding a job's dataset
}
"""The policies of ``gpupool.sim.policies``, named here so that ``--help`` stays light."""

TRACE_HELP = (
    "philly:PATH[?teams=a,b&start=2017-10-01&end=2017-11-01&limit=N], alibaba:PODS[?nodes=NODES]"
    ", csv:PATH, or a bare path. Quote it: the shell splits the command at '&'."
)
CLUSTER_HELP = (
    "NODESxGPUS[:MODEL[:MEMORY]] groups, comma-separated (4x4, 64x8:V100:32GiB,2x8:A100), "
    "or 'trace' for the nodes the trace lists."
)


def simulate(
    trace: str = typer.Option(..., "--trace", help=TRACE_HELP),
    cluster: str = typer.Option(..., "--cluster", help=CLUSTER_HELP),
    policy: list[str] = typer.Option(
        ["default"],
        "--policy",
        help="A policy, NAME or NAME:KNOB=VALUE,... (knobs: "
        + ", ".join(POLICY_KNOBS)
        + "); repeat for more; 'all' for every named policy.",
    ),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="A policy (as --policy) every row is measured against: a column 'VS NAME' gives "
        "each avg JCT over the baseline's (tiresias: Tiresias' DLAS-GPU); it is replayed "
        "too when no --policy names it.",
    ),
    restart_cost: float = typer.Option(
        60.0, "--restart-cost", min=0, help="Seconds of work a preempted job redoes."
    ),
    placement: str = typer.Option(
        "node",
        "--placement",
        help="node: each task on one node (big jobs become gangs of whole nodes); count: "
        "a job of g GPUs is g one-GPU tasks on any nodes (Tiresias' relaxed mode).",
    ),
    vc: bool = typer.Option(
        False,
        "--vc",
        help="One virtual cluster per team: each team is guaranteed GPUs in proportion to the "
        "GPU time it submits (rounded down) and lends what it leaves idle; a table with a row "
        "per team and policy follows.",
    ),
    datasets: int = typer.Option(
        0,
        "--datasets",
        min=0,
        help="Model datasets: each user's jobs use one of this many (a seeded hash), fetched "
        "onto each node that lacks it before the job's work starts; prints the bytes fetched "
        "(0: none, the default).",
    ),
    dataset_sizes: str = typer.Option(
        "50GB,200GB,500GB",
        "--dataset-sizes",
        help="The datasets' sizes, comma-separated, repeated in turn when --datasets is larger.",
    ),
    node_cache: str = typer.Option(
        "500GB",
        "--node-cache",
        help="Each node's dataset cache: past it, least recently used datasets no job uses go.",
    ),
    fetch_gbps: float = typer.Option(
        10.0, "--fetch-gbps", help="Gigabits a second at which a node fetches a dataset."
    ),
    fragmentation: bool = typer.Option(
        False,
        "--fragmentation",
        help="The fill experiment of the FGD study instead of a replay: tasks arrive in trace "
        "order and never end until they ask for 110 % of the GPUs; prints the unallocated "
        "GPUs when the first task fails and at given loads.",
    ),
    output: Output = typer.Option(
        Output.TABLE,
        "--output",
        "-o",
        case_sensitive=False,
        help="table (default) or json: every row unrounded with its bounds (times in seconds, "
        "shares as fractions of 1), and what was replayed on what.",
    ),
) -> None:
    """Replay a trace on a virtual clock through the scheduler and print a metrics table.

    On a terminal, a progress bar on stderr follows each replay."""
    if placement not in ("node", "count"):
        raise typer.BadParameter("use node or count", param_hint="--placement")
    policies = resolve_policies(policy, baseline)
    data = datasets_of(datasets, dataset_sizes, node_cache, fetch_gbps)
    loaded = load(trace)
    nodes = nodes_for(cluster, loaded)
    header = header_of(loaded, cluster, nodes, placement)
    if output == Output.TABLE:
        typer.echo(describe(loaded, cluster, nodes) + f"; placement {placement}")
    if fragmentation:
        fill_all(loaded, nodes, policies, header, output)
        return
    require_times(loaded)
    quotas = vc_quotas(loaded, nodes) if vc else ()
    if quotas and output == Output.TABLE:
        typer.echo(f"virtual clusters: {describe_quotas(quotas)}")
    if vc:
        header["virtual_clusters"] = {q.team: sum(q.guarantee.values()) for q in quotas}
    header["restart_cost_seconds"] = restart_cost
    if data is not None:
        header["datasets"] = {
            "sizes_bytes": list(data.sizes),
            "node_cache_bytes": data.cache_bytes,
            "fetch_bytes_per_second": data.bandwidth,
        }
    with progress_display() as shown:
        results = [
            (
                name,
                replay(loaded, nodes, settings, restart_cost, placement, quotas, shown, name, data),
            )
            for name, settings in policies.items()
        ]
    print_replays(header, results, quotas if vc else None, output, baseline)


def header_of(
    trace: Trace, spec: str, nodes: tuple[NodeCapacity, ...], placement: str
) -> dict[str, object]:
    """What was replayed on what, for the JSON report."""
    return {
        "trace": {
            "name": trace.name,
            "jobs": len(trace.jobs),
            "skipped": trace.skipped,
            "teams": list(trace.teams()),
        },
        "cluster": {
            "spec": spec,
            "nodes": len(nodes),
            "gpus": sum(len(node.gpus) for node in nodes),
        },
        "placement": placement,
    }


def require_times(trace: Trace) -> None:
    """A usage error for a replay of a trace without arrival and run times."""
    if not trace.timed:
        raise typer.BadParameter(
            f"{trace.name} has no arrival or run times (creation_time, deletion_time), so it "
            "cannot be replayed; it can drive the fill experiment: add --fragmentation",
            param_hint="--trace",
        )


def fill_all(
    trace: Trace,
    nodes: tuple[NodeCapacity, ...],
    policies: dict[str, Policy],
    header: dict[str, object],
    output: Output,
) -> None:
    """The fill experiment under each policy, then its table or JSON on stdout."""
    from gpupool.sim.report import fill_document, render_fill, to_json

    with progress_display() as shown:
        fills = [
            (name, fill(trace, nodes, settings, shown, name)) for name, settings in policies.items()
        ]
    if output == Output.JSON:
        typer.echo(to_json(fill_document(header, fills)), nl=False)
    else:
        typer.echo(render_fill(fills), nl=False)


def print_replays(
    header: dict[str, object],
    results: list[tuple[str, tuple[Metrics, SimResult]]],
    quotas: tuple[TeamQuota, ...] | None,
    output: Output,
    baseline: str | None = None,
) -> None:
    """The replays' table (and the teams' table of --vc), or the JSON report, on stdout;
    with a ``baseline``, each row's avg JCT over the baseline's."""
    from gpupool.sim.metrics import team_metrics
    from gpupool.sim.report import render, render_teams, replay_document, to_json

    teams = []
    if quotas is not None:
        guarantees = {quota.team: sum(quota.guarantee.values()) for quota in quotas}
        teams = [(name, team_metrics(result, guarantees)) for name, (_, result) in results]
    fetched = "datasets" in header
    if output == Output.JSON:
        rows = [(name, metrics, unscheduled_reasons(result)) for name, (metrics, result) in results]
        document = replay_document(header, rows, teams, baseline)
        if fetched:
            for row, (_, (_, result)) in zip(document["rows"], results, strict=True):
                row.update(fetch_figures(result))
        typer.echo(to_json(document), nl=False)
        return
    typer.echo(render([(name, metrics) for name, (metrics, _) in results], baseline), nl=False)
    if quotas is not None:
        typer.echo(render_teams(teams), nl=False)
    if fetched:
        for name, (_, result) in results:
            typer.echo(fetch_line(name, result))


def fetch_figures(result: SimResult) -> dict[str, float]:
    """What a replay with datasets fetched, for the JSON report."""
    return {
        "fetched_bytes": result.fetched_bytes,
        "fetches": result.fetches,
        "fetch_wait_seconds": result.fetch_wait,
    }


def fetch_line(name: str, result: SimResult) -> str:
    """What a replay with datasets fetched, in words."""
    return (
        f"{name}: fetched {result.fetched_bytes / 1e12:.2f} TB in {result.fetches} fetches; "
        f"jobs waited {result.fetch_wait / 3600:.1f} h in all for their data"
    )


def datasets_of(count: int, sizes: str, cache: str, gbps: float) -> Datasets | None:
    """The datasets model of the options (None: --datasets 0); a usage error for a size
    that is not one, or a bandwidth of 0 or less."""
    if not count:
        return None
    from gpupool.domain.units import parse_bytes
    from gpupool.sim.datasets import GB, Datasets

    try:
        each = [parse_bytes(part.strip()) for part in sizes.split(",") if part.strip()]
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--dataset-sizes") from None
    if not each:
        raise typer.BadParameter("give one size or more: 50GB,200GB", param_hint="--dataset-sizes")
    try:
        cache_bytes = parse_bytes(cache)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--node-cache") from None
    if not gbps > 0 or gbps == float("inf"):
        raise typer.BadParameter("a number of gigabits a second above 0", param_hint="--fetch-gbps")
    chosen = tuple(each[index % len(each)] for index in range(count))
    return Datasets(chosen, cache_bytes, gbps * GB / 8)


def progress_display() -> ProgressDisplay:
    from gpupool.sim.progress import ProgressDisplay

    return ProgressDisplay()


def resolve_policies(specs: list[str], baseline: str | None) -> dict[str, Policy]:
    """The policies of the specs by spec ('all': every named one), the baseline's last when
    no spec names it."""
    names = [name for spec in specs for name in (POLICY_NAMES if spec == "all" else (spec,))]
    policies = {name: resolve_policy(name) for name in dict.fromkeys(names)}
    if baseline is not None and baseline not in policies:
        try:
            policies[baseline] = resolve_policy(baseline)
        except typer.BadParameter as error:
            raise typer.BadParameter(error.message, param_hint="--baseline") from None
    return policies


def resolve_policy(spec: str) -> Policy:
    """The policy of a spec, ``NAME`` or ``NAME:KNOB=VALUE,...`` (``default:min_runtime=600``);
    a usage error (exit 2) saying what is known when it is not."""
    from dataclasses import replace

    from gpupool.sim.policies import named

    name, _, knobs = spec.partition(":")
    try:
        policy = named(name)
    except KeyError:
        known = ", ".join(POLICY_NAMES)
        raise typer.BadParameter(
            f"unknown policy '{name}'; known: {known}", param_hint="--policy"
        ) from None
    changes: dict[str, object] = {}
    for knob in filter(None, knobs.split(",")):
        key, equals, text = knob.partition("=")
        kind = POLICY_KNOBS.get(key.strip())
        if kind is None or not equals:
            raise typer.BadParameter(
                f"'{knob}' in '{spec}' is not KNOB=VALUE with a known knob; knobs: "
                + ", ".join(POLICY_KNOBS),
                param_hint="--policy",
            )
        changes[key.strip()] = _knob_value(spec, key.strip(), kind, text.strip())
    return replace(policy, **changes)


def _knob_value(spec: str, key: str, kind: object, text: str) -> object:
    if kind == ("on", "off"):
        if text not in kind:
            raise typer.BadParameter(f"{key} in '{spec}' is on or off", param_hint="--policy")
        return text == "on"
    if isinstance(kind, tuple):
        if text not in kind:
            raise typer.BadParameter(
                f"{key} in '{spec}' is one of {', '.join(kind)}", param_hint="--policy"
            )
        return text
    if kind is int:
        if not text.isdigit():
            raise typer.BadParameter(
                f"{key} in '{spec}' is a whole number of 0 or more, not '{text}'",
                param_hint="--policy",
            )
        return int(text)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise typer.BadParameter(
            f"{key} in '{spec}' is a number of 0 or more, not '{text}'", param_hint="--policy"
        )
    return value


def load(spec: str) -> Trace:
    from gpupool.sim.traces import load_trace

    try:
        return load_trace(spec)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--trace") from None


def nodes_for(spec: str, trace: Trace) -> tuple[NodeCapacity, ...]:
    """The cluster named by ``spec``, or the trace's own nodes for 'trace'."""
    from gpupool.sim.engine import cluster

    if spec == "trace":
        if not trace.nodes:
            raise typer.BadParameter("this trace lists no nodes", param_hint="--cluster")
        return trace.nodes
    try:
        return cluster(spec)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--cluster") from None


def describe(trace: Trace, spec: str, nodes: tuple[NodeCapacity, ...]) -> str:
    gpus = sum(len(node.gpus) for node in nodes)
    skipped = f" ({trace.skipped} rows skipped)" if trace.skipped else ""
    return (
        f"trace {trace.name}: {len(trace.jobs)} jobs{skipped}; "
        f"cluster {spec}: {len(nodes)} nodes, {gpus} GPUs"
    )


def replay(
    trace: Trace,
    nodes: tuple[NodeCapacity, ...],
    settings: Policy,
    restart_cost: float,
    placement: str = "node",
    quotas: tuple[TeamQuota, ...] = (),
    shown: ProgressDisplay | None = None,
    label: str = "",
    datasets: Datasets | None = None,
) -> tuple[Metrics, SimResult]:
    """Run one policy; say on stderr how long it took and why jobs never ran, if any did not.

    Fragmentation is sampled at the arrivals that find 90 % of the GPUs allocated. ``shown``:
    where its progress is shown (a terminal), as ``label``.
    """
    from dataclasses import replace

    from gpupool.sim.engine import simulate as run_simulation
    from gpupool.sim.fragmentation import FragmentationProbe, loaded_fragmentation, workload
    from gpupool.sim.metrics import summarize

    largest = max((len(node.gpus) for node in nodes if node.schedulable), default=0)
    probe = FragmentationProbe(nodes, workload(trace.jobs, placement, largest))
    watched = shown.watch(f"replaying {label}", len(trace.jobs), probe) if shown else probe
    began = time.perf_counter()
    result = run_simulation(
        trace.jobs,
        nodes,
        restart_cost=restart_cost,
        placement=placement,
        settings=settings,
        quotas=quotas,
        probe=watched,
        datasets=datasets,
    )
    seconds = time.perf_counter() - began
    typer.echo(f"replayed in {seconds:.1f} s, {result.cycles} scheduling cycles", err=True)
    for line in unscheduled_lines(result):
        typer.echo(line, err=True)
    metrics = replace(summarize(result), fragmentation=loaded_fragmentation(probe))
    return metrics, result


def unscheduled_lines(result: SimResult, most: int = 5) -> list[str]:
    """How many jobs never ran, counted by reason (the commonest first)."""
    if not result.unscheduled:
        return []
    reasons = unscheduled_reasons(result)
    lines = [f"{len(result.unscheduled)} jobs never ran (UNSCHEDULED):"]
    lines += [f"  {count} x {reason}" for reason, count in reasons.most_common(most)]
    if len(reasons) > most:
        lines.append(f"  ... and {len(reasons) - most} other reasons")
    return lines


def unscheduled_reasons(result: SimResult) -> Counter[str]:
    """How many jobs never ran, by reason."""
    return Counter(job.reason for job in result.unscheduled)


def fill(
    trace: Trace,
    nodes: tuple[NodeCapacity, ...],
    settings: Policy,
    shown: ProgressDisplay | None = None,
    label: str = "",
) -> FillReport:
    """The fill experiment under one policy; its time on stderr, its progress on ``shown``."""
    from gpupool.sim.fragmentation import fill as run_fill

    def watch(probe: Probe, tasks: int) -> Probe:
        return shown.watch(f"filling {label}", tasks, probe) if shown else probe

    began = time.perf_counter()
    report = run_fill(trace.jobs, nodes, settings, watch=watch)
    typer.echo(f"filled in {time.perf_counter() - began:.1f} s", err=True)
    return report


def vc_quotas(trace: Trace, nodes: tuple[NodeCapacity, ...]) -> tuple[TeamQuota, ...]:
    """A guarantee per team in proportion to the GPU time it submits, rounded down."""
    from gpupool.scheduler.types import ANY_MODEL, TeamQuota

    gpus = sum(len(node.gpus) for node in nodes if node.schedulable)
    asked: dict[str, float] = defaultdict(float)
    for job in trace.jobs:
        asked[job.team] += job.request.gpu_count * job.duration
    total = sum(asked.values())
    if total <= 0:
        return ()
    return tuple(
        TeamQuota(team, {ANY_MODEL: float(int(gpus * seconds / total))})
        for team, seconds in sorted(asked.items())
    )


def describe_quotas(quotas: tuple[TeamQuota, ...]) -> str:
    shown = [f"{quota.team} {sum(quota.guarantee.values()):g}" for quota in quotas]
    return ", ".join(shown) + " GPUs guaranteed; idle GPUs are lent to other teams"
