"""The Philly-derived CSV of Microsoft's Philly trace (``philly:PATH``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from gpupool.domain.jobs import ResourceRequest
from gpupool.sim.traces._common import (
    Row,
    Trace,
    as_utc,
    build_trace,
    epoch_seconds,
    gc_paused,
    parse_number,
    read_table,
    valid_request,
)

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")

PHILLY_CPUS = 1e-3
"""CPUs asked by every Philly job. The trace records no CPUs; a thousandth of a core keeps the
CPU dimension from ever being the constraint (a node with 1 CPU fits 1,000 such jobs, far more
than its GPUs) while staying valid for ``ResourceRequest`` (``cpus`` must be more than 0)."""


@gc_paused()
def load_philly(
    path: str | Path,
    *,
    teams: Iterable[str] | None = None,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
    limit: int | None = None,
) -> Trace:
    """Load the Philly-derived CSV (``timestamp,duration,num_gpus,gpu_time,cluster``).

    ``cluster`` (the virtual cluster) is the team and the user: the trace has no users.
    ``timestamp`` (``YYYY-MM-DD HH:MM:SS``) is taken as UTC. Each job asks for ``num_gpus`` GPUs,
    :data:`PHILLY_CPUS` CPUs and no memory (the trace records neither).

    Filters: ``teams`` (team ids; a ValueError naming the trace's teams when one is not in
    it), ``start`` <= submit < ``end`` (datetimes or ISO text; naive =
    UTC), then ``limit`` keeps the first N jobs by submit time. Rows whose duration or num_gpus
    is not positive are skipped; ``Trace.skipped`` counts those that passed the filters (the
    published file has none). Submit times count from the first kept job; ``Trace.origin`` is its
    wall-clock time.

    The Tiresias comparison subset, team ``11cb48`` in October 2017, is
    ``teams={"11cb48"}, start="2017-10-01", end="2017-11-01"``: the bounds
    2017-10-01 00:00:00 <= timestamp < 2017-11-01 00:00:00 (UTC, as written in the file) give
    exactly 6,134 jobs.
    """
    table = read_table(path, "Philly trace", PHILLY_COLUMNS)
    wanted = _team_set(teams)
    low = as_utc(start).timestamp() if start is not None else None
    high = as_utc(end).timestamp() if end is not None else None
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, not {limit}")
    at, took, count, team_at = (
        table.columns[name] for name in ("timestamp", "duration", "num_gpus", "cluster")
    )
    picked: list[Row] = []
    requests: dict[float, ResourceRequest] = {}
    skipped = 0
    teams_seen: set[str] = set()
    for job_id, (line, row) in enumerate(table.rows, start=1):
        team = row[team_at]
        teams_seen.add(team)
        if wanted is not None and team not in wanted:
            continue
        try:
            submit = epoch_seconds(row[at])
        except ValueError:
            raise table.error(line, f"timestamp '{row[at]}' is not YYYY-MM-DD HH:MM:SS") from None
        if (low is not None and submit < low) or (high is not None and submit >= high):
            continue
        try:
            duration = parse_number(row[took], "duration")
            gpus = parse_number(row[count], "num_gpus")
            if duration <= 0 or gpus <= 0:
                skipped += 1
                continue
            request = requests.get(gpus)
            if request is None:
                request = requests[gpus] = valid_request(gpus, PHILLY_CPUS, None)
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
        picked.append((submit, job_id, duration, team, team, request, ()))
    _check_teams(wanted, teams_seen, table.path)
    return build_trace(
        f"philly:{table.path.name}", picked, limit=limit, skipped=skipped, epoch_origin=True
    )


def _check_teams(wanted: frozenset[str] | None, seen: set[str], path: Path) -> None:
    """ValueError naming the trace's teams when a team asked for is not among them."""
    unknown = sorted((wanted or frozenset()) - seen)
    if unknown:
        raise ValueError(
            f"{path.name} has no team {', '.join(unknown)}; its teams (the cluster column): "
            f"{', '.join(sorted(seen)) or 'none'}"
        )


def _team_set(teams: Iterable[str] | None) -> frozenset[str] | None:
    if teams is None:
        return None
    return frozenset((teams,) if isinstance(teams, str) else teams)
