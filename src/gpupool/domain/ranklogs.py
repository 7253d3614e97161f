"""One stream from the logs of a distributed job's ranks: each line prefixed ``[rank 3] ``.

Lines stay whole: a chunk that ends mid-line is held until the rest arrives (or until
:meth:`RankLogMerger.flush`), so two ranks' halves never mix on one line. Carriage returns
are read as a terminal shows them: ``\\r\\n`` ends a line, and a lone ``\\r`` (a progress
bar redrawing itself) keeps only what follows it -- the line as last drawn. Bytes are decoded
as UTF-8 per rank, so a character split across two chunks is decoded whole; invalid bytes
become U+FFFD.

The prefix names the global rank (``[rank 3] ``); a process without a rank (mpirun, or
torchrun in its own mode, whose streams already merge several ranks) is labelled by its
task (``[task 1] ``): see :func:`rank_label` and :func:`task_label`.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable


def rank_label(rank: int) -> str:
    return f"rank {rank}"


def task_label(task_index: int) -> str:
    return f"task {task_index}"


def prefix(label: str) -> str:
    """The text put before each line of a stream: ``[rank 3] ``."""
    return f"[{label}] "


def prefix_text(label: str, text: str) -> str:
    """A finished log with each line prefixed (an unterminated last line gets a newline)."""
    merger = RankLogMerger()
    return "".join([*merger.feed(label, text), *merger.flush(label)])


def split_lines(text: str) -> tuple[list[str], str]:
    """``text`` as whole lines (without their ends, carriage returns resolved) and the
    unterminated rest, carriage returns resolved as well."""
    *whole, rest = text.replace("\r\n", "\n").split("\n")
    return [_as_drawn(line) for line in whole], _as_drawn(rest, pending=True)


def _as_drawn(line: str, pending: bool = False) -> str:
    """What a terminal shows of a line: the text after its last carriage return. A line
    still being written that ends in ``\\r`` keeps it: a ``\\n`` may follow (``\\r\\n``)."""
    if pending and line.endswith("\r"):
        return _as_drawn(line[:-1]) + "\r"
    return line.rsplit("\r", 1)[-1] if "\r" in line else line


class RankLogMerger:
    """Merges chunks of several streams, in the order the caller feeds them, into prefixed
    whole lines. The caller owns one per merged view (e.g. one per log request).

    ``max_pending`` bounds what is held of one stream's unfinished line: past it, the held
    text is given out as a line of its own (a stream that never ends its line cannot grow
    memory without bound).
    """

    def __init__(self, max_pending: int = 64 * 1024) -> None:
        self.max_pending = max_pending
        self._pending: dict[str, str] = {}
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}

    def feed(self, label: str, chunk: str | bytes) -> list[str]:
        """The whole lines this chunk completes, prefixed and ending in a newline."""
        text = self._decode(label, chunk) if isinstance(chunk, bytes) else chunk
        lines, rest = split_lines(self._pending.pop(label, "") + text)
        if len(rest) > self.max_pending:
            lines, rest = [*lines, rest.rstrip("\r")], ""
        if rest:
            self._pending[label] = rest
        return [f"{prefix(label)}{line}\n" for line in lines]

    def flush(self, label: str | None = None) -> list[str]:
        """The held unfinished line of ``label`` (of every stream when None), as a line."""
        labels = [*self._pending, *self._decoders] if label is None else [label]
        labels = list(dict.fromkeys(labels))
        for name in labels:
            decoder = self._decoders.pop(name, None)
            if decoder is not None:
                self._pending[name] = self._pending.get(name, "") + decoder.decode(b"", True)
        held = [(name, self._pending.pop(name, "").rstrip("\r")) for name in labels]
        return [f"{prefix(name)}{text}\n" for name, text in held if text]

    def pending(self) -> Iterable[str]:
        """The labels with an unfinished line held."""
        return tuple(self._pending)

    def _decode(self, label: str, chunk: bytes) -> str:
        if label not in self._decoders:
            self._decoders[label] = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return self._decoders[label].decode(chunk)


# -- reading one rank's lines back -----------------------------------------------------------

# a task's prefix, then a rank's: the executor may label a task's merged ranks once more
_PREFIXES = re.compile(r"(\[task \d+\] )?(\[rank \d+\] )?")


def select_lines(text: str, label: str) -> str:
    """The lines of a merged log that ``label`` wrote, in order, its prefix removed; the
    other lines (other ranks', or none's) are left out. A line may start with a task's
    prefix and then a rank's (``[task 1] [rank 5] ``): it is then both's, and only the one
    asked for is removed; what follows those is the program's own text, never a prefix. A
    last line without its end is judged the same way and kept without one."""
    mark = prefix(label)
    *whole, rest = text.split("\n")
    lines = [f"{line}\n" for line in whole] + ([rest] if rest else [])
    return "".join(kept for line in lines if (kept := _without(line, mark)) is not None)


def _without(line: str, mark: str) -> str | None:
    """``line`` without ``mark`` when ``mark`` is one of its prefixes, else None."""
    head = _PREFIXES.match(line)
    assert head is not None  # both groups are optional: it always matches
    for group in (1, 2):
        if head.group(group) == mark:
            return line[: head.start(group)] + line[head.end(group) :]
    return None
