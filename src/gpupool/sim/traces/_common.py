"""What every trace loader shares: the trace and its jobs, reading a CSV with a header, and
the parsing of its cells (numbers, requests, GPU types, timestamps)."""

from __future__ import annotations

import csv
import gc
import io
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from pydantic import ValidationError

from gpupool.domain.jobs import ResourceRequest
from gpupool.scheduler.types import NodeCapacity

UNTIMED_DURATION = 1.0  # seconds: the placeholder run time of a task list without times


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


Row = tuple[float, int, float, str, str, ResourceRequest, tuple[str, ...]]
"""A parsed job before sorting: (submit, job_id, duration, team, user, request, gpu_types)."""


@dataclass(frozen=True, slots=True)
class Table:
    """A CSV file: its column positions and its data rows, read lazily as (line number, cells)."""

    path: Path
    columns: Mapping[str, int]
    rows: Iterator[tuple[int, list[str]]]

    def error(self, line: int, message: str) -> ValueError:
        return ValueError(f"{self.path}, line {line}: {message}")


def read_table(path: str | Path, kind: str, required: Sequence[str], hint: str = "") -> Table:
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
    return Table(path, MappingProxyType(columns), _rows(reader, path, len(header)))


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


def parse_number(text: str, column: str) -> float:
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


def valid_request(
    gpus: float | None, cpus: float, memory: int | None, gpu_memory: int | None = None
) -> ResourceRequest:
    """The shared request for these values; ValueError with pydantic's reasons when invalid."""
    try:
        return _request(gpus, cpus, memory, gpu_memory)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        ) from None


def parse_gpu_types(text: str) -> tuple[str, ...]:
    """'V100M16|V100M32|V100M32' -> ('V100M16', 'V100M32'): split on '|', duplicates dropped."""
    return tuple(dict.fromkeys(part.strip() for part in text.split("|") if part.strip()))


def epoch_seconds(text: str) -> float:
    """Seconds since the Unix epoch of an ISO timestamp; naive timestamps are taken as UTC."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        return (moment - _EPOCH).total_seconds()  # 3x faster than replace(tzinfo).timestamp()
    return moment.timestamp()


_EPOCH = datetime(1970, 1, 1)


@contextmanager
def gc_paused() -> Iterator[None]:
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


def as_utc(value: datetime | str) -> datetime:
    """A datetime (or ISO text) as an aware UTC datetime; naive values are taken as UTC."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def build_trace(
    name: str,
    picked: list[Row],
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
