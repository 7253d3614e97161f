"""Workload traces for the simulator: two public GPU-cluster traces and a generic CSV.

Every loader returns a :class:`Trace`: jobs with a submit time (seconds after the trace's first
submit), a run time, a team, a user and a :class:`ResourceRequest`, plus the cluster's nodes when
the trace ships a node list. Parsing is pure (stdlib ``csv``, no I/O beyond reading the file).

Formats (docs/scheduling.md, "The traces", says where the public traces come from):

- ``philly:PATH[?teams=a,b&start=2017-10-01&end=2017-11-01&limit=N]`` — the Philly-derived CSV
  (:func:`load_philly`).
- ``alibaba:PODS[?nodes=NODES]`` — an Alibaba ``openb`` pod list, optionally with a node list
  (:func:`load_alibaba`).
- ``csv:PATH`` — the generic CSV below (:func:`load_generic`).
- a bare path — the format is chosen by the file's header (:func:`load_trace`).

Generic CSV (``csv:PATH``), one job per row, header required, columns in any order::

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

The generic format is strict: a malformed or unusable row is a ``ValueError`` naming its line.
The public traces are taken as published: rows whose run time or GPU count is not positive are
skipped and counted in :attr:`Trace.skipped`; rows that cannot be parsed at all are errors.
"""

from __future__ import annotations

import csv
import gc
import io
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Protocol
from urllib.parse import parse_qs

from pydantic import ValidationError

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.units import GiB, MiB, parse_bytes
from gpupool.scheduler.types import GpuCapacity, NodeCapacity

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
ALIBABA_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
ALIBABA_TIMES = ("creation_time", "deletion_time")
ALIBABA_DEFAULT_TEAM = "pods"  # the team of every pod of a list without a qos column
UNTIMED_DURATION = 1.0  # seconds: the placeholder run time of a task list without times
GENERIC_REQUIRED = ("submit", "duration", "gpus", "team")
GENERIC_OPTIONAL = ("user", "cpus", "memory", "gpu_memory", "gpu_type", "censored", "jct")

PHILLY_CPUS = 1e-3
"""CPUs asked by every Philly job. The trace records no CPUs; a thousandth of a core keeps the
CPU dimension from ever being the constraint (a node with 1 CPU fits 1,000 such jobs, far more
than its GPUs) while staying valid for ``ResourceRequest`` (``cpus`` must be more than 0)."""

GPU_MEMORY_BYTES: Mapping[str, int] = MappingProxyType(
    {
        # Public models: the memory of the card sold under that name.
        "T4": 16 * GiB,
        "P100": 16 * GiB,
        "V100M16": 16 * GiB,
        "V100M32": 32 * GiB,
        "A10": 24 * GiB,
        # G1, G2, G3 are Alibaba's undisclosed internal codes. Assumption: 16 GiB, the size most
        # of the trace's public models share. The openb pods ask for GPU compute (gpu_milli),
        # never GPU memory, and the scheduler sizes a fraction's memory in proportion to the
        # GPU, so this figure only matters to jobs that ask for GPU memory explicitly.
        "G1": 16 * GiB,
        "G2": 16 * GiB,
        "G3": 16 * GiB,
    }
)
"""GPU memory per model of the Alibaba node lists, which give no GPU memory."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace.

    ``job_id``: the job's data-row number in its file (the first row after the header is 1), so
    ids stay the same whatever filters pick; ``submit``: seconds after the trace's first submit;
    ``duration``: seconds of run time (> 0); ``gpu_types``: the GPU models it may run on, empty
    for any. The ``request`` may be shared between jobs with the same needs: treat it as
    read-only. ``censored``: still running when its history was exported, so ``duration`` is
    a lower bound; ``observed_jct``: its real completion time (submit to end), when known.
    """

    job_id: int
    submit: float
    duration: float
    team: str
    user: str
    request: ResourceRequest
    gpu_types: tuple[str, ...] = ()
    censored: bool = False
    observed_jct: float | None = None


@dataclass(frozen=True)
class Trace:
    """A workload: jobs sorted by (submit, job_id), and the cluster when the trace has one.

    ``skipped``: rows left out because their run time or GPU count was not positive (or, for
    Alibaba, had no usable run time). ``origin``: the wall-clock time (UTC) of submit 0.0 when the
    trace has wall-clock times, else None. ``timed``: False for a task list without arrival and
    run times (Alibaba's ``multigpu50``): its jobs all arrive at 0.0 in file order and run
    :data:`UNTIMED_DURATION`, placeholders that only the fill experiment (which orders tasks by
    arrival and runs each forever) may use; a replay refuses such a trace.
    """

    name: str
    jobs: tuple[TraceJob, ...]
    nodes: tuple[NodeCapacity, ...] = ()
    skipped: int = 0
    origin: datetime | None = None
    timed: bool = True

    def teams(self) -> tuple[str, ...]:
        """The teams that submit jobs, sorted."""
        return tuple(sorted({job.team for job in self.jobs}))

    def offered_gpu_seconds(self) -> float:
        """GPU-seconds the jobs ask for: GPUs (a fraction counts as such) times run time."""
        return math.fsum(job.request.gpu_count * job.duration for job in self.jobs)

    def span(self) -> float:
        """Seconds from the first submit to the last; 0.0 for an empty trace."""
        return self.jobs[-1].submit - self.jobs[0].submit if self.jobs else 0.0


# ---------------------------------------------------------------------------------- helpers

_Row = tuple[float, int, float, str, str, ResourceRequest, tuple[str, ...]]
"""A parsed job before sorting: (submit, job_id, duration, team, user, request, gpu_types)."""


@dataclass(frozen=True, slots=True)
class _Table:
    """A CSV file: its column positions and its data rows, read lazily as (line number, cells)."""

    path: Path
    columns: Mapping[str, int]
    rows: Iterator[tuple[int, list[str]]]

    def error(self, line: int, message: str) -> ValueError:
        return ValueError(f"{self.path}, line {line}: {message}")


def _read_table(path: str | Path, kind: str, required: Sequence[str], hint: str = "") -> _Table:
    """Open a CSV with a header; ValueError when the file or a required column is missing."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{kind} file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {kind} file {path}: {exc}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [name.strip() for name in next(reader, [])]
    columns = {name: index for index, name in enumerate(header)}
    missing = [name for name in required if name not in columns]
    if missing:
        raise ValueError(
            f"{path} is not a valid {kind} file: it lacks the column(s) {', '.join(missing)} "
            f"(header: {','.join(header) or 'empty'}){hint}"
        )
    return _Table(path, MappingProxyType(columns), _rows(reader, path, len(header)))


class _LineReader(Protocol):
    """A ``csv.reader``: rows, and the line the last row ended on."""

    line_num: int

    def __iter__(self) -> Iterator[list[str]]: ...


def _rows(reader: _LineReader, path: Path, width: int) -> Iterator[tuple[int, list[str]]]:
    """Non-blank rows with their line numbers; ValueError for a row of the wrong width."""
    for row in reader:
        if len(row) != width:
            if not row:
                continue
            line = reader.line_num
            raise ValueError(f"{path}, line {line}: {len(row)} fields, the header has {width}")
        yield reader.line_num, row


def _number(text: str, column: str) -> float:
    """A finite float from a cell; ValueError naming the column otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column} '{text}' is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{column} '{text}' is not a finite number")
    return value


@lru_cache(maxsize=8192)
def _request(
    gpus: float | None, cpus: float, memory: int | None, gpu_memory: int | None = None
) -> ResourceRequest:
    """One validated, shared ResourceRequest per distinct value (pydantic runs once per value)."""
    return ResourceRequest(gpus=gpus, cpus=cpus, memory_bytes=memory, gpu_memory_bytes=gpu_memory)


def _valid_request(
    gpus: float | None, cpus: float, memory: int | None, gpu_memory: int | None = None
) -> ResourceRequest:
    """The shared request for these values; ValueError with pydantic's reasons when invalid."""
    try:
        return _request(gpus, cpus, memory, gpu_memory)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        ) from None


def _gpu_types(text: str) -> tuple[str, ...]:
    """'V100M16|V100M32|V100M32' -> ('V100M16', 'V100M32'): split on '|', duplicates dropped."""
    return tuple(dict.fromkeys(part.strip() for part in text.split("|") if part.strip()))


def _epoch_seconds(text: str) -> float:
    """Seconds since the Unix epoch of an ISO timestamp; naive timestamps are taken as UTC."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        return (moment - _EPOCH).total_seconds()  # 3x faster than replace(tzinfo).timestamp()
    return moment.timestamp()


_EPOCH = datetime(1970, 1, 1)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a loader builds many acyclic objects.

    Its collections, triggered by the allocations alone, took a third of the Philly load time
    and find nothing: the jobs, tuples and strings a loader builds have no reference cycles.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _utc(value: datetime | str) -> datetime:
    """A datetime (or ISO text) as an aware UTC datetime; naive values are taken as UTC."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _build(
    name: str,
    picked: list[_Row],
    *,
    limit: int | None = None,
    nodes: tuple[NodeCapacity, ...] = (),
    skipped: int = 0,
    epoch_origin: bool = False,
    timed: bool = True,
) -> Trace:
    """Sort (submit, job_id, duration, team, user, request, gpu_types) rows into a Trace."""
    picked.sort(key=lambda item: (item[0], item[1]))
    if limit is not None:
        del picked[limit:]
    first = picked[0][0] if picked else 0.0
    jobs = tuple(
        TraceJob(job_id, submit - first, duration, team, user, request, gpu_types, *observed)
        for submit, job_id, duration, team, user, request, gpu_types, *observed in picked
    )
    origin = datetime.fromtimestamp(first, UTC) if epoch_origin and picked else None
    return Trace(name, jobs, nodes, skipped, origin, timed)


# ----------------------------------------------------------------------------------- Philly


@_gc_paused()
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
    table = _read_table(path, "Philly trace", PHILLY_COLUMNS)
    wanted = _team_set(teams)
    low = _utc(start).timestamp() if start is not None else None
    high = _utc(end).timestamp() if end is not None else None
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, not {limit}")
    at, took, count, team_at = (
        table.columns[name] for name in ("timestamp", "duration", "num_gpus", "cluster")
    )
    picked: list[_Row] = []
    requests: dict[float, ResourceRequest] = {}
    skipped = 0
    teams_seen: set[str] = set()
    for job_id, (line, row) in enumerate(table.rows, start=1):
        team = row[team_at]
        teams_seen.add(team)
        if wanted is not None and team not in wanted:
            continue
        try:
            submit = _epoch_seconds(row[at])
        except ValueError:
            raise table.error(line, f"timestamp '{row[at]}' is not YYYY-MM-DD HH:MM:SS") from None
        if (low is not None and submit < low) or (high is not None and submit >= high):
            continue
        try:
            duration = _number(row[took], "duration")
            gpus = _number(row[count], "num_gpus")
            if duration <= 0 or gpus <= 0:
                skipped += 1
                continue
            request = requests.get(gpus)
            if request is None:
                request = requests[gpus] = _valid_request(gpus, PHILLY_CPUS, None)
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
        picked.append((submit, job_id, duration, team, team, request, ()))
    _check_teams(wanted, teams_seen, table.path)
    return _build(
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


# ---------------------------------------------------------------------------------- Alibaba


@_gc_paused()
def load_alibaba(pods_path: str | Path, nodes_path: str | Path | None = None) -> Trace:
    """Load an Alibaba ``openb`` pod list, and its cluster from a node list when given.

    Only the columns used are required: ``cpu_milli,memory_mib,num_gpu,gpu_milli``, and the
    times ``creation_time,deletion_time`` (both or neither); ``gpu_spec``, ``qos`` and
    ``scheduled_time`` are used when present.

    - team: the trace has no tenants, so the pod's QoS class (``LS``, ``BE``, ``Burstable``,
      ``Guaranteed``) stands in for the team, and the user is the team; without a ``qos``
      column every pod is of team :data:`ALIBABA_DEFAULT_TEAM`.
    - submit: ``creation_time``; run time: ``deletion_time - scheduled_time`` when the pod was
      scheduled and that is positive, else ``deletion_time - creation_time`` (pods still
      ``Pending`` at the end have no ``scheduled_time``; their wait counts as run time). Rows
      with neither positive are skipped and counted.
    - GPUs: ``num_gpu`` 0 -> no GPU; ``num_gpu`` 1 with ``gpu_milli`` < 1000 -> the fraction
      ``gpu_milli / 1000``; otherwise ``num_gpu`` whole GPUs. ``gpu_spec`` (``A|B``) gives the
      allowed GPU models, empty = any.
    - CPUs: ``cpu_milli / 1000``; memory: ``memory_mib`` MiB.

    A list without times (the ``multigpu50`` variant: ``name`` and the four resource columns)
    loads as an untimed task list (``Trace.timed`` False): enough for the fill experiment,
    which takes tasks in file order and never ends them, not for a replay.
    """
    table = _read_table(pods_path, "Alibaba pod list", _ALIBABA_POD_REQUIRED)
    timed = _alibaba_timed(table)
    columns = table.columns
    spec_at, qos_at = columns.get("gpu_spec"), columns.get("qos")
    picked: list[_Row] = []
    skipped = 0
    for job_id, (line, row) in enumerate(table.rows, start=1):
        try:
            when = _alibaba_times(row, columns) if timed else (0.0, UNTIMED_DURATION)
            if when is None:
                skipped += 1
                continue
            request = _alibaba_request(row, columns)
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
        gpu_types = _gpu_types(row[spec_at]) if spec_at is not None else ()
        team = row[qos_at].strip() if qos_at is not None else ALIBABA_DEFAULT_TEAM
        picked.append((when[0], job_id, when[1], team, team, request, gpu_types))
    nodes = load_alibaba_nodes(nodes_path) if nodes_path is not None else ()
    name = f"alibaba:{table.path.name}"
    return _build(name, picked, nodes=nodes, skipped=skipped, timed=timed)


_ALIBABA_POD_REQUIRED = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def _alibaba_timed(table: _Table) -> bool:
    """Whether a pod list has arrival and run times: both time columns, or neither."""
    present = [name for name in ALIBABA_TIMES if name in table.columns]
    if len(present) == 1:
        missing = next(name for name in ALIBABA_TIMES if name not in present)
        raise ValueError(
            f"{table.path} has {present[0]} but not {missing}: a pod list gives both times "
            "(a replay) or neither (the fill experiment, --fragmentation)"
        )
    return bool(present)


def _alibaba_times(row: list[str], columns: Mapping[str, int]) -> tuple[float, float] | None:
    """(submit, run time) of a pod; None when it has no usable run time."""
    created = _number(row[columns["creation_time"]], "creation_time")
    duration = _alibaba_duration(
        row, created, columns["deletion_time"], columns.get("scheduled_time")
    )
    return None if duration is None else (created, duration)


def _alibaba_request(row: list[str], columns: Mapping[str, int]) -> ResourceRequest:
    gpus = _alibaba_gpus(row[columns["num_gpu"]], row[columns["gpu_milli"]])
    cpus = _number(row[columns["cpu_milli"]], "cpu_milli") / 1000
    memory = _number(row[columns["memory_mib"]], "memory_mib")
    if memory < 0:
        raise ValueError(f"memory_mib '{row[columns['memory_mib']]}' is negative")
    return _valid_request(gpus, cpus, int(memory * MiB))


def _alibaba_duration(
    row: list[str], created: float, deleted_at: int, scheduled_at: int | None
) -> float | None:
    """Run time of a pod: from scheduling (else creation) to deletion; None when not positive."""
    if not row[deleted_at].strip():
        return None
    deleted = _number(row[deleted_at], "deletion_time")
    if scheduled_at is not None and row[scheduled_at].strip():
        ran = deleted - _number(row[scheduled_at], "scheduled_time")
        if ran > 0:
            return ran
    lived = deleted - created
    return lived if lived > 0 else None


def _alibaba_gpus(num_gpu: str, gpu_milli: str) -> float | None:
    """GPUs of a pod: None for none, a fraction for a shared GPU, else a whole count."""
    count = _number(num_gpu, "num_gpu")
    if count < 0 or count != int(count):
        raise ValueError(f"num_gpu '{num_gpu}' is not a whole number of GPUs")
    if count == 0:
        return None
    milli = _number(gpu_milli, "gpu_milli")
    if count == 1 and milli < 1000:
        if milli <= 0:
            raise ValueError(f"gpu_milli '{gpu_milli}' must be more than 0 with num_gpu 1")
        return milli / 1000
    return count


def load_alibaba_nodes(path: str | Path) -> tuple[NodeCapacity, ...]:
    """Load an ``openb`` node list (``sn,cpu_milli,memory_mib,gpu,model``) as node capacities.

    Every listed node is kept: the all-node list includes its CPU-only nodes (0 GPUs), the
    GPU-node list has none. GPU ``i`` of node ``sn`` is ``f"{sn}-gpu{i}"``; its memory comes from
    :data:`GPU_MEMORY_BYTES` (the trace gives none); an unknown model with GPUs is an error.
    """
    table = _read_table(path, "Alibaba node list", ALIBABA_NODE_COLUMNS)
    name_at, cpu_at, mem_at, gpu_at, model_at = (
        table.columns[name] for name in ALIBABA_NODE_COLUMNS
    )
    nodes = []
    for line, row in table.rows:
        name, model = row[name_at].strip(), row[model_at].strip()
        try:
            cpus = _number(row[cpu_at], "cpu_milli") / 1000
            memory = _number(row[mem_at], "memory_mib")
            count = _number(row[gpu_at], "gpu")
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
        if not name or cpus < 0 or memory < 0 or count < 0 or count != int(count):
            raise table.error(line, "a node needs a name and non-negative whole resources")
        if count and model not in GPU_MEMORY_BYTES:
            known = ", ".join(GPU_MEMORY_BYTES)
            raise table.error(line, f"GPU model '{model}' has no known memory (known: {known})")
        gpus = tuple(
            GpuCapacity(f"{name}-gpu{index}", index, model, GPU_MEMORY_BYTES[model])
            for index in range(int(count))
        )
        nodes.append(NodeCapacity(name, gpus, cpus, int(memory * MiB)))
    return tuple(nodes)


# ---------------------------------------------------------------------------------- generic


@_gc_paused()
def load_generic(path: str | Path) -> Trace:
    """Load the generic CSV described in this module's docstring; strict about every row."""
    table = _read_table(path, "generic trace", GENERIC_REQUIRED)
    unknown = [name for name in table.columns if name not in (*GENERIC_REQUIRED, *GENERIC_OPTIONAL)]
    if unknown:
        known = ",".join((*GENERIC_REQUIRED, *GENERIC_OPTIONAL))
        raise ValueError(f"{table.path}: unknown column(s) {', '.join(unknown)} (known: {known})")
    picked: list[_Row] = []
    for job_id, (line, row) in enumerate(table.rows, start=1):
        try:
            picked.append(_generic_row(table, row, job_id))
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
    return _build(f"csv:{table.path.name}", picked)


def _generic_row(table: _Table, row: list[str], job_id: int) -> _Row:
    def cell(name: str) -> str:
        index = table.columns.get(name)
        return row[index].strip() if index is not None else ""

    submit = _number(cell("submit"), "submit")
    duration = _number(cell("duration"), "duration")
    if duration <= 0:
        raise ValueError(f"duration {cell('duration')} must be more than 0 seconds")
    gpus = _number(cell("gpus"), "gpus") if cell("gpus") else 0.0
    if gpus < 0:
        raise ValueError(f"gpus {cell('gpus')} must be 0 or more")
    team = cell("team")
    if not team:
        raise ValueError("team is empty")
    cpus = _number(cell("cpus"), "cpus") if cell("cpus") else 1.0
    memory = parse_bytes(cell("memory")) if cell("memory") else None
    gpu_memory = parse_bytes(cell("gpu_memory")) if cell("gpu_memory") else None
    request = _valid_request(gpus or None, cpus, memory, gpu_memory)
    user = cell("user") or team
    gpu_types = _gpu_types(cell("gpu_type"))
    observed = (_censored(cell("censored")), _observed_jct(cell("jct"), duration))
    return (submit, job_id, duration, team, user, request, gpu_types, *observed)  # type: ignore[return-value]


def _censored(text: str) -> bool:
    if text not in ("", "0", "1"):
        raise ValueError(f"censored '{text}' must be 1 (still running at export), 0 or empty")
    return text == "1"


def _observed_jct(text: str, duration: float) -> float | None:
    if not text:
        return None
    jct = _number(text, "jct")
    if jct + 1.0 < duration:  # a second of rounding either way
        raise ValueError(f"jct {text} is shorter than the duration {duration:g}: give end - submit")
    return jct


# --------------------------------------------------------------------------------- dispatch

FORMATS = ("philly", "alibaba", "csv")
_PHILLY_KEYS = {"teams", "start", "end", "limit"}
_ALIBABA_KEYS = {"nodes"}


def load_trace(spec: str) -> Trace:
    """Load a trace named on a command line.

    ``philly:PATH[?teams=a,b&start=2017-10-01&end=2017-11-01&limit=N]``,
    ``alibaba:PODS[?nodes=NODES]``, ``csv:PATH``, or a bare path whose header chooses the
    format. ValueError for an unknown format, a missing file, unknown options or bad rows.
    """
    prefix, colon, rest = spec.partition(":")
    if not colon or Path(spec).is_file():
        return _load_by_header(spec)
    if prefix not in FORMATS:
        raise ValueError(
            f"unknown trace format '{prefix}' in '{spec}': use philly:PATH, alibaba:PODS, "
            "csv:PATH or a bare path"
        )
    path, _, query = rest.partition("?")
    if not path:
        raise ValueError(f"'{spec}' names no file after '{prefix}:'")
    options = _options(query, spec)
    if prefix == "philly":
        _only(options, _PHILLY_KEYS, spec)
        return load_philly(
            path,
            teams=options["teams"].split(",") if "teams" in options else None,
            start=_date_option(options, "start", spec),
            end=_date_option(options, "end", spec),
            limit=_limit_option(options, spec),
        )
    if prefix == "alibaba":
        _only(options, _ALIBABA_KEYS, spec)
        return load_alibaba(path, options.get("nodes"))
    _only(options, set(), spec)
    return load_generic(path)


def _load_by_header(path: str) -> Trace:
    """Choose the loader from the header line of a bare path."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"trace file {path} does not exist")
    with file.open(newline="", encoding="utf-8") as handle:
        header = {name.strip() for name in next(csv.reader(handle), [])}
    if {"timestamp", "num_gpus", "cluster"} <= header:
        return load_philly(file)
    if {"cpu_milli", "num_gpu", "gpu_milli"} <= header:
        return load_alibaba(file)
    if {"sn", "gpu", "model"} <= header:
        raise ValueError(f"{path} is an Alibaba node list: use alibaba:PODS?nodes={path}")
    if set(GENERIC_REQUIRED) <= header:
        return load_generic(file)
    raise ValueError(
        f"cannot tell the trace format of {path} from its header ({','.join(sorted(header))}): "
        "prefix it with philly:, alibaba: or csv:"
    )


def _options(query: str, spec: str) -> dict[str, str]:
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"'{spec}': options must look like ?key=value&key=value") from None
    repeated = [key for key, values in parsed.items() if len(values) > 1]
    if repeated:
        raise ValueError(f"'{spec}': option(s) {', '.join(repeated)} given more than once")
    return {key: values[0] for key, values in parsed.items()}


def _only(options: Mapping[str, str], allowed: set[str], spec: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise ValueError(f"'{spec}': unknown option(s) {', '.join(unknown)} (known: {known})")


def _date_option(options: Mapping[str, str], key: str, spec: str) -> datetime | None:
    if key not in options:
        return None
    try:
        return _utc(options[key])
    except ValueError:
        raise ValueError(
            f"'{spec}': {key}={options[key]} is not a date (2017-10-01 or 2017-10-01T12:00:00)"
        ) from None


def _limit_option(options: Mapping[str, str], spec: str) -> int | None:
    if "limit" not in options:
        return None
    text = options["limit"]
    if not text.isdigit():
        raise ValueError(f"'{spec}': limit={text} is not a whole number of jobs")
    return int(text)
