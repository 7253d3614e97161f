"""A plain-text table of replay metrics: a row per policy, a column per figure, and the bounds.

Each figure is read against its limit: the line under the table gives the least possible
average JCT (the mean isolated runtime) and the most possible utilisation (the offered load).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from gpupool.sim.metrics import Bounds, Metrics

COLUMNS = (
    "POLICY",
    "JOBS",
    "UNSCHEDULED",
    "AVG JCT",
    "MEDIAN JCT",
    "P95 JCT",
    "AVG WAIT",
    "P95 WAIT",
    "UTIL",
    "MAKESPAN",
    "PREEMPTIONS",
    "PER JOB",
    "JAIN",
    "WORST TEAM SLOWDOWN",
)
WIDTH = 200  # wide enough that the table is never folded


def render(rows: Sequence[tuple[str, Metrics]]) -> str:
    """The table for (policy name, metrics) rows, then the bounds line(s), as plain text."""
    text = io.StringIO()
    console = Console(file=text, width=WIDTH, color_system=None, highlight=False)
    console.print(metrics_table(rows))
    for line in bounds_lines(rows):
        console.print(line, markup=False)
    return text.getvalue()


def metrics_table(rows: Sequence[tuple[str, Metrics]]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "POLICY" else "right")
    for name, metrics in rows:
        table.add_row(name, *metric_cells(metrics))
    return table


def metric_cells(metrics: Metrics) -> list[str]:
    """The figures of one row, in column order."""
    return [
        str(metrics.jobs),
        str(metrics.unscheduled),
        duration(metrics.avg_jct),
        duration(metrics.median_jct),
        duration(metrics.p95_jct),
        duration(metrics.avg_queueing_delay),
        duration(metrics.p95_queueing_delay),
        percent(metrics.utilisation),
        span(metrics.makespan),
        str(metrics.preemptions),
        f"{metrics.preemptions_per_job:.2f}",
        f"{metrics.jain_fairness:.3f}",
        f"{metrics.worst_team_slowdown:.1f} ({metrics.worst_team or '-'})",
    ]


def bounds_lines(rows: Sequence[tuple[str, Metrics]]) -> list[str]:
    """One line when every policy ran the same jobs (the usual case), else one per policy."""
    distinct = {metrics.bounds for _, metrics in rows}
    if len(distinct) == 1:
        return [f"bounds: {bounds_text(distinct.pop())}"]
    return [f"bounds ({name}): {bounds_text(metrics.bounds)}" for name, metrics in rows]


def bounds_text(bounds: Bounds) -> str:
    return (
        f"avg JCT >= {duration(bounds.min_avg_jct)} (mean isolated runtime); "
        f"utilisation <= {percent(bounds.max_utilisation)} "
        f"(offered load {percent(bounds.offered_load)})"
    )


def duration(seconds: float) -> str:
    """A JCT or a delay: 42 s, 12.5 min, or hours however large (3.83 h, 221.50 h)."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def span(seconds: float) -> str:
    """A makespan: as ``duration`` up to two days, then days (49.5 d)."""
    return duration(seconds) if seconds < 48 * 3600 else f"{seconds / 86400:.1f} d"


def percent(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"
