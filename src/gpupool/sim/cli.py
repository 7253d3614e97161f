"""``gpupool simulate``: replay a trace on a made-up cluster under one or more policies.

Registered on the main ``gpupool`` app, so its module-level imports stay light (Typer only):
the trace loaders, the engine and the scheduler are imported when the command runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from gpupool.scheduler.types import NodeCapacity, Policy
    from gpupool.sim.metrics import Metrics
    from gpupool.sim.traces import Trace

POLICY_NAMES = ("default", "fifo", "drf", "srtf-oracle", "las")
"""The policies of ``gpupool.sim.policies``, named here so that ``--help`` stays light."""

TRACE_HELP = (
    "philly:PATH[?teams=a,b&start=2017-10-01&end=2017-11-01&limit=N], alibaba:PODS[?nodes=NODES]"
    ", csv:PATH, or a bare path."
)
CLUSTER_HELP = (
    "NODESxGPUS[:MODEL[:MEMORY]] groups, comma-separated (4x4, 64x8:V100:32GiB,2x8:A100), "
    "or 'trace' for the nodes the trace lists."
)


def simulate(
    trace: str = typer.Option(..., "--trace", help=TRACE_HELP),
    cluster: str = typer.Option(..., "--cluster", help=CLUSTER_HELP),
    policy: list[str] = typer.Option(["default"], "--policy", help="A policy; repeat for more."),
    restart_cost: float = typer.Option(
        60.0, "--restart-cost", min=0, help="Seconds of work a preempted job redoes."
    ),
    placement: str = typer.Option(
        "node",
        "--placement",
        help="node: each task on one node (big jobs become gangs of whole nodes); count: "
        "a job of g GPUs is g one-GPU tasks on any nodes (Tiresias' relaxed mode).",
    ),
) -> None:
    """Replay a trace on a virtual clock through the scheduler and print a metrics table."""
    from gpupool.sim.report import render

    if placement not in ("node", "count"):
        raise typer.BadParameter("use node or count", param_hint="--placement")
    policies = {name: resolve_policy(name) for name in dict.fromkeys(policy)}
    loaded = load(trace)
    nodes = nodes_for(cluster, loaded)
    typer.echo(describe(loaded, cluster, nodes) + f"; placement {placement}")
    rows = [
        (name, replay(loaded, nodes, settings, restart_cost, placement))
        for name, settings in policies.items()
    ]
    typer.echo(render(rows), nl=False)


def resolve_policy(name: str) -> Policy:
    """The policy of a name; a usage error (exit 2) listing the known names if none."""
    from gpupool.sim.policies import named

    try:
        return named(name)
    except KeyError:
        known = ", ".join(POLICY_NAMES)
        raise typer.BadParameter(
            f"unknown policy '{name}'; known: {known}", param_hint="--policy"
        ) from None


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
) -> Metrics:
    """Run one policy; say on stderr how long it took and why jobs never ran, if any did not."""
    from gpupool.sim.engine import simulate as run_simulation
    from gpupool.sim.metrics import summarize

    began = time.perf_counter()
    result = run_simulation(
        trace.jobs, nodes, restart_cost=restart_cost, placement=placement, settings=settings
    )
    seconds = time.perf_counter() - began
    typer.echo(f"replayed in {seconds:.1f} s, {result.cycles} scheduling cycles", err=True)
    if result.unscheduled:
        first = result.unscheduled[0]
        typer.echo(
            f"{len(result.unscheduled)} jobs never ran, e.g. job {first.job_id} "
            f"({first.gpus:g} GPUs): {first.reason}",
            err=True,
        )
    return summarize(result)
