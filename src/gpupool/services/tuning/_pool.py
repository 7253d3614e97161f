"""What a tuning, a fidelity check and the rollback watch replay over: the history of a
window of time as a trace, the pool's schedulable nodes, the teams' quotas and the live
settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpupool.services import identity, schedsettings
from gpupool.services.core import Submits
from gpupool.services.tuning._history import past_jobs, trace_of
from gpupool.sim.traces import Trace


def history(ctx: Submits, since: float, until: float) -> tuple[list[Any], Trace]:
    """The jobs submitted between ``since`` and ``until``, and their trace."""
    with ctx.db.reader() as session:
        jobs = past_jobs(session, since, until, ctx.clock.now())
    return jobs, trace_of(jobs, Path(ctx.settings.data_dir) / "tmp")


def pool_nodes(ctx: Submits) -> tuple[Any, ...]:
    """The pool's schedulable nodes, as the control loop last saw them."""
    return tuple(node for node in ctx.loop.recent_nodes() if node.schedulable)


def team_quotas(ctx: Submits) -> tuple[Any, ...]:
    with ctx.db.reader() as session:
        return identity.team_quotas(session)


def live_policy(ctx: Submits) -> Any:
    """The policy of the live settings (``schedsettings``)."""
    return schedsettings.config(ctx).knobs.onto(ctx.settings.policy())
