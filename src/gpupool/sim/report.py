"""A plain-text table of replay metrics: a row per policy, a column per figure, and the bounds.

Each figure is read against its limit: the line under the table gives the least possible
average JCT (the mean isolated runtime) and the most possible utilisation (the offered load).
The same report as JSON (``gpupool simulate -o json``): :func:`replay_document` and
:func:`fill_document`, unrounded, times in seconds and shares as fractions of 1.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from gpupool.sim.fragmentation import LEVELS, FillReport, Sample
from gpupool.sim.metrics import Bounds, Metrics, TeamMetrics

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
    "FRAG",
)
TEAM_COLUMNS = (
    "TEAM",
    "POLICY",
    "VC GPUS",
    "JOBS",
    "UNSCHEDULED",
    "AVG JCT",
    "P95 WAIT",
    "USED/VC",
    "USED/POOL",
    "PREEMPTIONS",
)
FILL_COLUMNS = (
    "POLICY",
    "TASKS",
    "FAILED",
    "FIRST FAILURE AT",
    "UNALLOC AT FIRST FAILURE",
    "FRAG AT FIRST FAILURE",
    *(f"UNALLOC AT {level * 100:.0f} %" for level in LEVELS),
    "FRAG AT END",
    "PREEMPTIONS",
)
WIDTH = 200  # wide enough that the table is never folded


def render(rows: Sequence[tuple[str, Metrics]], baseline: str | None = None) -> str:
    """The table for (policy name, metrics) rows, then the bounds line(s), as plain text;
    with the name of a ``baseline`` row, a last column of each avg JCT over the baseline's."""
    text = io.StringIO()
    console = Console(file=text, width=WIDTH, color_system=None, highlight=False)
    console.print(metrics_table(rows, baseline))
    for line in bounds_lines(rows):
        console.print(line, markup=False)
    return text.getvalue()


def metrics_table(rows: Sequence[tuple[str, Metrics]], baseline: str | None = None) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "POLICY" else "right")
    if baseline is not None:
        table.add_column(f"VS {baseline.upper()}", justify="right")
    ratios = jct_ratios(rows, baseline)
    for name, metrics in rows:
        extra = [] if baseline is None else [_ratio_text(ratios.get(name))]
        table.add_row(name, *metric_cells(metrics), *extra)
    return table


def jct_ratios(rows: Sequence[tuple[str, Metrics]], baseline: str | None) -> dict[str, float]:
    """Each row's avg JCT over the ``baseline`` row's (none where it has no finite, positive
    one: no job ran)."""
    base = next((metrics.avg_jct for name, metrics in rows if name == baseline), math.nan)
    if not (math.isfinite(base) and base > 0):
        return {}
    return {name: metrics.avg_jct / base for name, metrics in rows}


def _ratio_text(ratio: float | None) -> str:
    return "-" if ratio is None or not math.isfinite(ratio) else f"{ratio:.2f}"


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
        "-" if metrics.fragmentation is None else percent(metrics.fragmentation),
    ]


def render_teams(rows: Sequence[tuple[str, Sequence[TeamMetrics]]]) -> str:
    """A row per team and policy (teams by name, policies in the given order)."""
    table = _table(TEAM_COLUMNS, left=("TEAM", "POLICY"))
    by_team: dict[str, list[tuple[str, TeamMetrics]]] = {}
    for name, teams in rows:
        for team in teams:
            by_team.setdefault(team.team, []).append((name, team))
    for team in sorted(by_team):
        for name, figures in by_team[team]:
            table.add_row(team, name, *team_cells(figures))
    return _text(table)


def team_cells(team: TeamMetrics) -> list[str]:
    used = team.used_of_guarantee
    return [
        f"{team.guarantee:g}",
        str(team.jobs),
        str(team.unscheduled),
        duration(team.avg_jct),
        duration(team.p95_queueing_delay),
        "-" if used is None else percent(used),
        percent(team.used_of_pool),
        str(team.preemptions),
    ]


def render_fill(rows: Sequence[tuple[str, FillReport]]) -> str:
    """The fill experiment's table (shares of the cluster's GPUs), and how to read it."""
    table = _table(FILL_COLUMNS, left=("POLICY",))
    for name, report in rows:
        table.add_row(name, *fill_cells(report))
    note = (
        "arrived = GPUs asked by the tasks so far / GPUs of the cluster; UNALLOC = unallocated "
        "GPUs / all GPUs (a perfect packer leaves max(0, 100 % - arrived)); FRAG = FGD's "
        "fragmentation (unallocated GPU capacity the typical task cannot use) / all GPUs"
    )
    return _text(table) + note + "\n"


def fill_cells(report: FillReport) -> list[str]:
    total = report.total_gpus
    first = report.first_failure

    def share(value: float | None) -> str:
        return "-" if value is None else percent(value)

    return [
        str(report.tasks),
        str(report.failed),
        "-" if first is None else f"{percent(first.arrived / total)} arrived",
        share(report.unallocated(first)),
        share(
            None if first is None or first.fragmentation is None else first.fragmentation / total
        ),
        *(share(report.unallocated(report.at_levels.get(level))) for level in LEVELS),
        share(
            None
            if report.final is None or report.final.fragmentation is None
            else report.final.fragmentation / total
        ),
        str(report.preemptions),
    ]


def _table(columns: Sequence[str], left: Sequence[str]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right")
    return table


def _text(table: Table) -> str:
    text = io.StringIO()
    Console(file=text, width=WIDTH, color_system=None, highlight=False).print(table)
    return text.getvalue()


def bounds_lines(rows: Sequence[tuple[str, Metrics]]) -> list[str]:
    """One line when every policy ran the same jobs (the usual case), else one per policy."""
    distinct = {metrics.bounds for _, metrics in rows}
    if len(distinct) == 1:
        return [f"bounds: {bounds_text(distinct.pop())}"]
    return [f"bounds ({name}): {bounds_text(metrics.bounds)}" for name, metrics in rows]


def bounds_text(bounds: Bounds) -> str:
    return (
        f"avg JCT >= {duration(bounds.min_avg_jct)} (mean isolated runtime), "
        f">= {duration(bounds.srpt_avg_jct)} (SRPT of the GPU-seconds on one server as fast "
        "as the cluster); "
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


# ------------------------------------------------------------------------------------- JSON

JSON_VERSION = 1
UNITS = "times in seconds; utilisation, fairness, fragmentation and shares as fractions of 1"


def replay_document(
    header: Mapping[str, Any],
    rows: Sequence[tuple[str, Metrics, Mapping[str, int]]],
    teams: Sequence[tuple[str, Sequence[TeamMetrics]]] = (),
    baseline: str | None = None,
) -> dict[str, Any]:
    """The report of replays as JSON-ready data: ``header`` (what was replayed on what), then
    a row per (policy, metrics, unscheduled jobs by reason) with the row's bounds, and the
    rows per team of ``--vc``. With a ``baseline``: its name, and in each row
    ``avg_jct_vs_baseline``, its avg JCT over the baseline's (null: none ran)."""
    document = {"version": JSON_VERSION, "units": UNITS, **header}
    document["rows"] = [
        {"policy": name, **asdict(metrics), "unscheduled_reasons": dict(reasons)}
        for name, metrics, reasons in rows
    ]
    if baseline is not None:
        document["baseline"] = baseline
        ratios = jct_ratios([(name, metrics) for name, metrics, _ in rows], baseline)
        for row in document["rows"]:
            row["avg_jct_vs_baseline"] = ratios.get(row["policy"])
    if teams:
        document["teams"] = [
            {"policy": name, **asdict(team)} for name, figures in teams for team in figures
        ]
    return document


def fill_document(
    header: Mapping[str, Any], rows: Sequence[tuple[str, FillReport]]
) -> dict[str, Any]:
    """The fill experiment's report as JSON-ready data: a row per policy, its samples in
    GPUs with the unallocated share of the cluster."""
    return {
        "version": JSON_VERSION,
        "units": UNITS,
        **header,
        "fill": [{"policy": name, **fill_row(report)} for name, report in rows],
    }


def fill_row(report: FillReport) -> dict[str, Any]:
    return {
        "total_gpus": report.total_gpus,
        "tasks": report.tasks,
        "failed": report.failed,
        "preemptions": report.preemptions,
        "first_failure": sample_data(report, report.first_failure),
        "at_levels": [
            {"arrived_share": level, **(sample_data(report, report.at_levels.get(level)) or {})}
            for level in LEVELS
        ],
        "final": sample_data(report, report.final),
    }


def sample_data(report: FillReport, sample: Sample | None) -> dict[str, Any] | None:
    if sample is None:
        return None
    return {
        "arrived_gpus": sample.arrived,
        "allocated_gpus": sample.allocated,
        "unallocated_share": report.unallocated(sample),
        "fragmentation_gpus": sample.fragmentation,
    }


def to_json(document: Mapping[str, Any]) -> str:
    """Indented JSON; a figure that is not a finite number (no job ran) becomes null."""
    return json.dumps(_finite(document), indent=2) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
