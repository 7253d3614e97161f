"""The generic CSV (``csv:PATH``), one job per row, header required, columns in any order::

    submit,duration,gpus,team[,user][,cpus][,memory][,gpu_memory][,gpu_type][,censored][,jct]

- ``submit``: seconds, any origin (the earliest row becomes 0.0); ``duration``: seconds of run
  time, more than 0.
- ``gpus``: a whole number (1, 2, 8), a fraction of one GPU (0.25), or 0 / empty for no GPU.
- ``team``: the tenant; ``user``: defaults to the team.
- ``cpus``: defaults to 1 (the ``ResourceRequest`` default); ``memory`` and ``gpu_memory``: byte
  quantities such as ``20GiB`` or ``512MiB`` (:func:`gpupool.domain.units.parse_bytes`), empty =
  not asked; ``gpu_type``: allowed GPU models separated by ``|`` (``V100M16|V100M32``), empty =
  any.
- ``censored``: 1 for a job still running when the history was exported: its ``duration`` is
  the service seen so far, a lower bound (empty or 0: it ended). ``jct``: the job's observed
  completion time, submit to end, in seconds (empty: unknown), which a replay's fidelity is
  measured against (``gpupool.sim.tuning.fidelity``).

The format is strict: a malformed or unusable row is a ``ValueError`` naming its line.
"""

from __future__ import annotations

from pathlib import Path

from gpupool.domain.units import parse_bytes
from gpupool.sim.traces._common import (
    Row,
    Table,
    Trace,
    build_trace,
    gc_paused,
    parse_gpu_types,
    parse_number,
    read_table,
    valid_request,
)

GENERIC_REQUIRED = ("submit", "duration", "gpus", "team")
GENERIC_OPTIONAL = ("user", "cpus", "memory", "gpu_memory", "gpu_type", "censored", "jct")


@gc_paused()
def load_generic(path: str | Path) -> Trace:
    """Load the generic CSV described in this module's docstring; strict about every row."""
    table = read_table(path, "generic trace", GENERIC_REQUIRED)
    unknown = [name for name in table.columns if name not in (*GENERIC_REQUIRED, *GENERIC_OPTIONAL)]
    if unknown:
        known = ",".join((*GENERIC_REQUIRED, *GENERIC_OPTIONAL))
        raise ValueError(f"{table.path}: unknown column(s) {', '.join(unknown)} (known: {known})")
    picked: list[Row] = []
    for job_id, (line, row) in enumerate(table.rows, start=1):
        try:
            picked.append(_generic_row(table, row, job_id))
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
    return build_trace(f"csv:{table.path.name}", picked)


def _generic_row(table: Table, row: list[str], job_id: int) -> Row:
    def cell(name: str) -> str:
        index = table.columns.get(name)
        return row[index].strip() if index is not None else ""

    submit = parse_number(cell("submit"), "submit")
    duration = parse_number(cell("duration"), "duration")
    if duration <= 0:
        raise ValueError(f"duration {cell('duration')} must be more than 0 seconds")
    gpus = parse_number(cell("gpus"), "gpus") if cell("gpus") else 0.0
    if gpus < 0:
        raise ValueError(f"gpus {cell('gpus')} must be 0 or more")
    team = cell("team")
    if not team:
        raise ValueError("team is empty")
    cpus = parse_number(cell("cpus"), "cpus") if cell("cpus") else 1.0
    memory = parse_bytes(cell("memory")) if cell("memory") else None
    gpu_memory = parse_bytes(cell("gpu_memory")) if cell("gpu_memory") else None
    request = valid_request(gpus or None, cpus, memory, gpu_memory)
    user = cell("user") or team
    gpu_types = parse_gpu_types(cell("gpu_type"))
    observed = (_censored(cell("censored")), _observed_jct(cell("jct"), duration))
    return (submit, job_id, duration, team, user, request, gpu_types, *observed)  # type: ignore[return-value]


def _censored(text: str) -> bool:
    if text not in ("", "0", "1"):
        raise ValueError(f"censored '{text}' must be 1 (still running at export), 0 or empty")
    return text == "1"


def _observed_jct(text: str, duration: float) -> float | None:
    if not text:
        return None
    jct = parse_number(text, "jct")
    if jct + 1.0 < duration:  # a second of rounding either way
        raise ValueError(f"jct {text} is shorter than the duration {duration:g}: give end - submit")
    return jct
