"""The workload's combined output, written to a file with a size cap (stdlib only)."""

from __future__ import annotations

import errno
import os

FULL = (errno.ENOSPC, errno.EDQUOT)


class CappedLog:
    """Appends bytes to a file until ``limit`` bytes of workload output have been written.

    Past the cap one marker line is written and further output is dropped. The runner's own
    notes (``note``) are always written: there are only a handful per attempt.
    Writes go straight to the file descriptor, so a reader following the file sees them live.
    While the disk is full, output is dropped (the workload goes on), and the first write
    that fits afterwards says how much was lost.
    """

    def __init__(self, path: str, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.written = 0
        self.capped = False
        self.lost = 0  # bytes dropped because the disk was full
        self._at_line_start = True
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self._fd = os.open(path, flags, 0o644)

    def write(self, data: bytes) -> None:
        """Append workload output, honouring the cap."""
        if self.capped or not data:
            return
        room = self.limit - self.written
        if len(data) <= room:
            self._emit(data)
            self.written += len(data)
            return
        if room > 0:
            self._emit(data[:room])
            self.written += room
        self.capped = True
        self.note(f"log limit of {self.limit} bytes reached; further output discarded")

    def note(self, text: str) -> None:
        """Append one line from the runner itself, on a line of its own."""
        prefix = b"" if self._at_line_start else b"\n"
        self._emit(prefix + f"[gpupool] {text}\n".encode())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _emit(self, data: bytes) -> None:
        if self.lost:
            lost, self.lost = self.lost, 0
            if not self._write(
                f"\n[gpupool] {lost} bytes of output lost: the disk was full\n".encode()
            ):
                self.lost = lost + len(data)
                return
        if not self._write(data):
            self.lost += len(data)
            return
        self._at_line_start = data.endswith(b"\n")

    def _write(self, data: bytes) -> bool:
        """Write all of ``data``; False (nothing more written) when the disk is full."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as e:
            if e.errno not in FULL:
                raise
            return False
        return True
