"""Job arrays as Slurm's ``sbatch --array`` knows them: one spec, many tasks, one index each.

An array's indexes are written as sbatch takes them: ``0-999``, ``1,3,5-7``, ``0-99:2``
(every second), and ``%50`` at the end runs at most 50 of its tasks at once. Or given as a
list of numbers. Indexes are whole numbers from 0 to ``MAX_ARRAY_INDEX``; an index given
twice is one task. How many tasks one array may have is the server's setting
(``GPUPOOL_MAX_ARRAY_TASKS``, at most ``MAX_ARRAY_TASKS``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_ARRAY_INDEX = 1_000_000
MAX_ARRAY_TASKS = 100_000  # the most any server allows; its own setting may say fewer
ACCEPTED = (
    "give indexes as sbatch --array takes them: 0-999, 1,3,5-7 or 0-99:2 (a step), "
    "optionally ending in %50 to run at most 50 tasks at once; indexes are 0-"
    f"{MAX_ARRAY_INDEX:,}"
)
_ITEM = re.compile(r"^(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?$")
_LIMIT = re.compile(r"^(.*)%(\d{1,9})$", re.DOTALL)


class ArraySpec(BaseModel):
    """The tasks of a job array: ``indexes`` as a list or an sbatch-style string, and
    ``max_running``, the most of its tasks that run at once (None: no limit; ``%N`` at the
    end of the string says the same). Once validated, ``indexes`` is the sorted list."""

    model_config = ConfigDict(extra="forbid")

    indexes: list[int] | str = Field(
        description="sbatch --array form ('0-999', '1,3,5-7', '0-99:2', '0-999%50') or a "
        f"list of indexes, each 0-{MAX_ARRAY_INDEX}",
        examples=["0-999%50", [1, 3, 5]],
    )
    max_running: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ARRAY_TASKS,
        description="the most tasks of the array that run at once; null: no limit",
    )

    @model_validator(mode="before")
    @classmethod
    def _parse_text(cls, data: Any) -> Any:
        """A string of indexes becomes the list; its ``%N`` becomes ``max_running``."""
        if not isinstance(data, dict) or not isinstance(data.get("indexes"), str):
            return data
        indexes, limit = parse_indexes(data["indexes"])
        given = data.get("max_running")
        if limit is not None and given is not None and given != limit:
            raise ValueError(
                f"the indexes say %{limit} and max_running says {given}: give the limit once"
            )
        return data | {"indexes": indexes, "max_running": limit if given is None else given}

    @model_validator(mode="after")
    def _normalise(self) -> ArraySpec:
        self.indexes = checked_indexes(self.indexes)
        return self

    @property
    def tasks(self) -> list[int]:
        """The indexes, sorted, each once."""
        assert isinstance(self.indexes, list)
        return self.indexes

    @property
    def text(self) -> str:
        """The indexes as sbatch writes them, with the limit: ``0-999%50``."""
        limit = f"%{self.max_running}" if self.max_running else ""
        return format_indexes(self.tasks) + limit


def parse_indexes(text: str) -> tuple[list[int], int | None]:
    """``'0-9:3,20%2'`` -> ([0, 3, 6, 9, 20], 2). Raises ValueError with the accepted form."""
    spec, limit = text.strip(), None
    found = _LIMIT.match(spec)
    if found:
        spec, limit = found.group(1), int(found.group(2))
        if limit < 1:
            raise ValueError(f"'%{limit}' runs no task: the limit is at least %1")
    if not spec:
        raise ValueError(f"'{text}' names no index: {ACCEPTED}")
    ranges = [_range(item.strip(), text) for item in spec.split(",")]
    if sum(len(r) for r in ranges) > MAX_ARRAY_TASKS:
        raise ValueError(f"'{text}' has more than {MAX_ARRAY_TASKS:,} tasks")
    return sorted({index for r in ranges for index in r}), limit


def checked_indexes(indexes: Iterable[int]) -> list[int]:
    """Sorted, each once, each within 0..MAX_ARRAY_INDEX and at most MAX_ARRAY_TASKS."""
    unique = sorted(set(indexes))
    if not unique:
        raise ValueError(f"an array has at least one task: {ACCEPTED}")
    if unique[0] < 0 or unique[-1] > MAX_ARRAY_INDEX:
        bad = unique[0] if unique[0] < 0 else unique[-1]
        raise ValueError(f"index {bad} is out of range: indexes are 0-{MAX_ARRAY_INDEX:,}")
    if len(unique) > MAX_ARRAY_TASKS:
        raise ValueError(f"an array has at most {MAX_ARRAY_TASKS:,} tasks")
    return unique


def format_indexes(indexes: Sequence[int]) -> str:
    """Sorted indexes in sbatch's form: [0..999] -> '0-999'; [0, 2, 4, 6] -> '0-6:2';
    [1, 3, 5, 6, 7] -> '1,3,5-7'."""
    if len(indexes) > 2:
        step = indexes[1] - indexes[0]
        if step > 1 and all(b - a == step for a, b in zip(indexes, indexes[1:], strict=False)):
            return f"{indexes[0]}-{indexes[-1]}:{step}"
    parts: list[str] = []
    start = previous = None
    for index in indexes:
        if previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None:
            parts.append(_run(start, previous))
        start = previous = index
    if start is not None:
        parts.append(_run(start, previous))
    return ",".join(parts)


def task_address(array_id: int, index: int) -> str:
    """How people write one task of an array: ``12_7`` (Slurm's ``%A_%a``)."""
    return f"{array_id}_{index}"


def _range(item: str, text: str) -> range:
    found = _ITEM.match(item)
    if not found:
        raise ValueError(f"'{text}' is not an array spec ('{item}' is not understood): {ACCEPTED}")
    first = int(found.group(1))
    last = int(found.group(2)) if found.group(2) else first
    step = int(found.group(3)) if found.group(3) else 1
    if last < first:
        raise ValueError(f"'{item}' counts down: write the smaller index first ({last}-{first})")
    if step < 1:
        raise ValueError(f"'{item}' has a step of 0: a step is at least 1")
    if last > MAX_ARRAY_INDEX:
        raise ValueError(f"index {last} is out of range: indexes are 0-{MAX_ARRAY_INDEX:,}")
    return range(first, last + 1, step)


def _run(start: int, end: int | None) -> str:
    return f"{start}-{end}" if end is not None and end != start else f"{start}"
