"""Forwarding a job's metrics: follow the file it writes, keep what is valid (stdlib only).

The job appends JSON lines to ``$GPUPOOL_METRICS_FILE`` (``gpupool.metrics`` documents the
format; the flat form ``{"step": 3, "loss": 0.25}`` is accepted too). The runner follows that
file as it grows, checks each line, and appends the valid points to ATTEMPT_DIR/metrics.jsonl,
a file the job cannot write, one JSON array per point: ``[name, step, time, value]``. The
server reads only that file, so a job can spoil nothing but its own points.

What is refused (a line that is not JSON, a bad name or value, a line over the size cap; the
points past the cap per attempt; the file past its size cap) is counted, and each kind of
problem is said once in the job's log with what to fix; the counts are summed up at the end.
The runner also adds its samples of the job's GPUs (``gpu.<index>.utilization``,
``gpu.<index>.memory_used``), names a job may not use.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat

from gpupool.runner import gpusamples

MAX_LINE_BYTES = 64 * 1024
MAX_POINTS = 1_000_000  # per attempt, of the job's own points
MAX_FILE_BYTES = 256 * 1024**2  # read of the job's file, per attempt
MAX_NAME = 100
MAX_STEP = 2**63 - 1
RESERVED_PREFIX = "gpu."  # the runner's GPU samples
READ_BYTES = 1 << 20  # per read of the job's file
FOLLOW_SECONDS = 0.1  # how often the job's file is looked at (an experiment waits on its points)
GPU_SAMPLE_SECONDS = 5.0
NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-")
FORMAT_HINT = 'write one JSON object per line: {"step": 3, "values": {"loss": 0.25}}'


def prepare(path: str, account: dict[str, object] | None) -> str | None:
    """Create the job's metrics file, new and empty, for the job's account to append to, in
    a directory of the runner's own (so that the job cannot swap it for a link elsewhere);
    None when done, else why the job's metrics cannot be forwarded."""
    directory = os.path.dirname(path)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o755)
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode):
            return f"{directory} is not a directory: remove it"
        if st.st_uid != os.geteuid():
            os.lchown(directory, os.geteuid(), os.getegid())  # a job's tree given back
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # never open what a job left there (a link to another file)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        return f"cannot create {path}: {e.strerror or e}"
    try:
        if account is not None and os.geteuid() == 0:
            os.fchown(fd, int(account["uid"]), int(account["gid"]))
    finally:
        os.close(fd)
    return None


class Limits:
    """The caps of one attempt (the module's defaults unless a test asks for others)."""

    def __init__(
        self,
        line_bytes: int = MAX_LINE_BYTES,
        points: int = MAX_POINTS,
        file_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        self.line_bytes = line_bytes
        self.points = points
        self.file_bytes = file_bytes


class LineError(ValueError):
    """A line of the job's metrics file that is refused; ``kind`` groups the reports."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_line(line: bytes, now: float) -> list[list[object]]:
    """The points ``[name, step, time, value]`` of one line; LineError says what is wrong."""
    try:
        record = json.loads(line)
    except ValueError as e:
        raise LineError("lines not JSON objects", f"not JSON ({e}); {FORMAT_HINT}") from e
    except RecursionError:  # json's decoder recurses per level: 30,000 '[' are 30 KB
        raise LineError(
            "lines not JSON objects", f"nested too deep to read; {FORMAT_HINT}"
        ) from None
    if not isinstance(record, dict):
        raise LineError("lines not JSON objects", f"not a JSON object; {FORMAT_HINT}")
    step = _step(record.get("step"))
    at = _time(record.get("time"), now)
    values = record.get("values")
    if values is None:  # the flat form: every other key is a metric
        values = {k: v for k, v in record.items() if k not in ("step", "time")}
    if not isinstance(values, dict) or not values:
        raise LineError("lines without values", f"no values; {FORMAT_HINT}")
    return [[_name(name), step, at, _value(name, value)] for name, value in values.items()]


class MetricSink:
    """Follows one attempt's metrics file and appends valid points to its records file.

    ``note``: writes a line of the runner's own into the job's log. ``gpus``: the job's GPU
    UUIDs in its order; ``devices``: their sampler (None: no GPU samples).
    """

    def __init__(
        self,
        source: str,
        records: str,
        note,  # noqa: ANN001 - callable(str)
        gpus: list[str] | None = None,
        devices=None,  # noqa: ANN001 - gpusamples.NvmlDevices | FileDevices | None
        limits: Limits | None = None,
    ) -> None:
        self.source = source
        self.note = note
        self.gpus = list(gpus or [])
        self.devices = devices if self.gpus else None
        self.limits = limits or Limits()
        self.offset = 0  # bytes of the job's file read
        self.lines = 0
        self.points = 0  # the job's own points kept
        self.refused: dict[str, int] = {}  # kind -> lines refused (points, past the cap)
        self.lost = 0  # points not written: the disk was full
        self.said: set[str] = set()
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None
        self._carry = b""  # a line not ended yet
        self._skipping = False  # inside a line over the cap: drop to its end
        self._records = os.open(
            records, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644
        )
        self.next_follow = 0.0
        self.next_sample = 0.0

    def due(self, monotonic: float) -> float:
        """Seconds until the sink wants ``poll`` again."""
        upcoming = self.next_follow
        if self.devices is not None:
            upcoming = min(upcoming, self.next_sample)
        return max(0.0, upcoming - monotonic)

    def poll(self, monotonic: float, now: float) -> None:
        """Read what the job wrote since the last poll; sample the GPUs when it is time."""
        if monotonic >= self.next_follow:
            self.next_follow = monotonic + FOLLOW_SECONDS
            self.follow(now)
        if self.devices is not None and monotonic >= self.next_sample:
            self.next_sample = monotonic + GPU_SAMPLE_SECONDS
            self.sample(now)

    def follow(self, now: float, final: bool = False) -> None:
        """Take in the job's new lines (with ``final``, a last line without its newline)."""
        while True:
            data = self._read()
            if not data:
                break
            self._take(data, now)
        if final and self._carry and not self._skipping:
            self._write(self._check(self._carry, now))
        if final:
            self._carry = b""

    def sample(self, now: float) -> None:
        """One sample of each of the job's GPUs, as points of the records file."""
        if self.devices is not None:
            self._write(gpusamples.points(self.devices.sample(self.gpus), self.gpus, now))

    def close(self, now: float) -> None:
        """Read the job's file to its end, sum up what was refused in the log, close."""
        self.follow(now, final=True)
        if self.refused:
            counts = "; ".join(f"{kind} ({n})" for kind, n in sorted(self.refused.items()))
            self.note(f"metrics: not kept: {counts}; the notes above say what to fix")
        if self.lost:
            self.note(f"metrics: {self.lost} points lost: the disk was full")
        for fd in (self._fd, self._records):
            if fd is not None:
                os.close(fd)
        self._fd = None

    # -- reading the job's file -----------------------------------------------------------

    def _read(self) -> bytes:
        """The next bytes of the job's file (a file replaced by the job is followed anew)."""
        fd = self._open()
        if fd is None:
            return b""
        room = self.limits.file_bytes - self.offset
        if room <= 0:
            self._over_file_cap(fd)
            return b""
        data = os.pread(fd, min(READ_BYTES, room), self.offset)
        self.offset += len(data)
        return data

    def _open(self) -> int | None:
        try:
            st = os.stat(self.source, follow_symlinks=False)
        except OSError:
            return self._fd
        if not stat.S_ISREG(st.st_mode):
            self._say_once("the metrics file must be a regular file: it is not read")
            return self._fd
        if (st.st_dev, st.st_ino) != self._ino:
            self._switch((st.st_dev, st.st_ino))
        elif st.st_size < self.offset:
            self._say_once("the metrics file was truncated: it is read again from its start")
            self.offset, self._carry = 0, b""
        return self._fd

    def _switch(self, ino: tuple[int, int]) -> None:
        """Follow the file now at the path from its start (the first open, or a new file)."""
        try:
            fd = os.open(self.source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return
        if self._fd is not None:
            os.close(self._fd)
            self.offset, self._carry = 0, b""
        self._fd, self._ino = fd, ino

    def _over_file_cap(self, fd: int) -> None:
        if os.fstat(fd).st_size > self.offset:
            cap = self.limits.file_bytes
            self._say_once(f"the metrics file is over {cap} bytes: the rest is not read")

    # -- lines ----------------------------------------------------------------------------

    def _take(self, data: bytes, now: float) -> None:
        chunk = self._carry + data
        lines = chunk.split(b"\n")
        self._carry = lines.pop()
        points: list[list[object]] = []
        for line in lines:
            if self._skipping:
                self._skipping = False  # the end of a line over the cap
                continue
            points += self._check(line, now)
        if len(self._carry) > self.limits.line_bytes and not self._skipping:
            self._skipping, self._carry = True, b""
            self.lines += 1
            self._too_long()
        elif self._skipping:
            self._carry = b""
        self._write(points)

    def _check(self, line: bytes, now: float) -> list[list[object]]:
        self.lines += 1
        if not line.strip():
            return []
        if len(line) > self.limits.line_bytes:
            self._too_long()
            return []
        try:
            points = parse_line(line, now)
        except LineError as e:
            self._refuse(e.kind, f"line {self.lines}: {e}")
            return []
        return self._within_cap(points)

    def _too_long(self) -> None:
        cap = self.limits.line_bytes
        self._refuse(
            "lines too long", f"line {self.lines} is over {cap} bytes: write shorter lines"
        )

    def _within_cap(self, points: list[list[object]]) -> list[list[object]]:
        room = self.limits.points - self.points
        if len(points) > room:
            cap = self.limits.points
            kept, over = points[: max(room, 0)], len(points) - max(room, 0)
            self._refuse(
                "points over the cap", f"over {cap} points in this attempt: report fewer", over
            )
            points = kept
        self.points += len(points)
        return points

    def _refuse(self, kind: str, message: str, count: int = 1) -> None:
        """Count refused lines (or points); say the first of each kind in the job's log."""
        if kind not in self.refused:
            self.note(f"metrics: {message}")
        self.refused[kind] = self.refused.get(kind, 0) + count

    def _say_once(self, message: str) -> None:
        """A problem with the file as a whole, said once."""
        if message not in self.said:
            self.said.add(message)
            self.note(f"metrics: {message}")

    def _write(self, points: list[list[object]]) -> None:
        if not points:
            return
        data = "".join(json.dumps(p, separators=(",", ":")) + "\n" for p in points).encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._records, view) :]
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.lost += len(points)


def _step(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STEP:
        raise LineError(
            "lines with a bad step", f"step {value!r} is not a non-negative integer (or null)"
        )
    return value


def _time(value: object, now: float) -> float:
    if value is None:
        return now
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LineError("lines with a bad time", f"time {value!r} is not seconds since the epoch")
    if not math.isfinite(value) or value < 0:
        raise LineError("lines with a bad time", f"time {value!r} is not seconds since the epoch")
    return float(value)


def _name(name: str) -> str:
    if not 0 < len(name) <= MAX_NAME or not NAME_CHARS.issuperset(name):
        raise LineError(
            "lines with a bad name",
            f"name {name[:120]!r}: use 1 to {MAX_NAME} characters of A-Z a-z 0-9 _ . / -",
        )
    if name.startswith(RESERVED_PREFIX):
        raise LineError(
            "lines with a bad name", f"name {name!r}: names starting with gpu. are the runner's own"
        )
    return name


def _value(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LineError("lines with a bad value", f"{name}: {value!r} is not a number")
    number = float(value) if abs(value) < 1e308 else math.inf
    if not math.isfinite(number):
        raise LineError("lines with a bad value", f"{name}: {value!r} is not a finite number")
    return number
