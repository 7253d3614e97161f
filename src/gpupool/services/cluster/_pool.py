"""The nodes page: the pool at a glance, and its nodes by fabric group.

Only a schedulable node's GPUs are free: a drained or down node's idle GPUs take no new work,
so the summary counts them apart (``unavailable``), not as free.
"""

from __future__ import annotations

from collections.abc import Sequence

import gpupool.services.cluster._nodes as nodes
from gpupool.domain.nodes import NodeState
from gpupool.domain.views import (
    FabricGroupView,
    ModelCountView,
    NodeView,
    PoolSummaryView,
    PoolView,
)
from gpupool.services.core import Principal, Reads


def show_pool(ctx: Reads, who: Principal) -> PoolView:
    """The pool's summary and its nodes by fabric group, as ``who`` may see them (another
    team's job shows only what it holds, as in ``nodes.list_nodes``)."""
    shown = nodes.list_nodes(ctx, who)
    return PoolView(summary=summarize(shown), groups=fabric_groups(shown))


def summarize(shown: Sequence[NodeView]) -> PoolSummaryView:
    """Nodes up, drained and down; GPUs in use, free (on schedulable nodes) and unavailable
    (idle on drained or down nodes), in all and by model."""
    by_model = gpus_by_model(shown)
    gpus = sum(model.gpus for model in by_model)
    used = _round(sum(model.in_use for model in by_model))
    free = _round(sum(model.free for model in by_model))
    down = sum(1 for node in shown if node.state is NodeState.DOWN)
    drained = sum(1 for node in shown if node.drain and node.state is not NodeState.DOWN)
    return PoolSummaryView(
        nodes=len(shown),
        up=len(shown) - down - drained,
        drained=drained,
        down=down,
        gpus=gpus,
        in_use=used,
        free=free,
        unavailable=_round(max(0.0, gpus - used - free)),
        by_model=by_model,
    )


def gpus_by_model(shown: Sequence[NodeView]) -> list[ModelCountView]:
    """Each model's GPUs, shares in use, and shares free on schedulable nodes; by model."""
    models: dict[str, list[float]] = {}  # model -> [GPUs, in use, free]
    for node in shown:
        for gpu in node.gpus:
            counts = models.setdefault(gpu.model, [0, 0.0, 0.0])
            counts[0] += 1
            counts[1] += gpu.used_share
            counts[2] += max(0.0, 1.0 - gpu.used_share) if node.schedulable else 0.0
    return [
        ModelCountView(model=model, gpus=int(gpus), in_use=_round(used), free=_round(free))
        for model, (gpus, used, free) in sorted(models.items())
    ]


def fabric_groups(shown: Sequence[NodeView]) -> list[FabricGroupView]:
    """The nodes by fabric group, groups by name, the nodes of none last; nodes keep their
    order."""
    groups: dict[str | None, list[NodeView]] = {}
    for node in shown:
        groups.setdefault(node.fabric_group, []).append(node)
    names = sorted(name for name in groups if name is not None)
    names += [None] if None in groups else []
    return [
        FabricGroupView(name=name, gpus=sum(len(n.gpus) for n in groups[name]), nodes=groups[name])
        for name in names
    ]


def _round(value: float) -> float:
    """Shares are sums of fractions: 0.1 + 0.2 shows as 0.3."""
    return round(value, 6)
