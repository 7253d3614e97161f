"""The attempts the control pipelines watch: one in-memory table that they share.

The launch pipeline adds an attempt once it is launched (re-adoption, once it is taken back
after a restart); reconcile, stops and checkpoints read it; reconcile removes an attempt once
its end is recorded, and everyone who keeps something per attempt or job is told then
(``on_forget``). It lives in the control thread only: no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpupool.domain.jobs import StopReason
from gpupool.executors.base import Executor, Handle
from gpupool.executors.task import Observed
from gpupool.services.jobs import Watched


@dataclass
class ActiveAttempt:
    """An attempt the control pipelines watch. ``grace``: its job's SIGTERM-to-SIGKILL time;
    ``stop_reason``: a stop recorded in the database (sent once ``stop_sent``)."""

    attempt_id: int
    job_id: int
    number: int
    handle: Handle
    observed: Observed = Observed.STARTING
    stop_sent: bool = False
    grace: float = 30.0
    max_runtime: float | None = None
    started_at: float | None = None
    stop_reason: StopReason | None = None
    # what its runner said it is doing before the start (building its environment), as
    # last recorded on the job
    progress: str | None = None

    def past_max_runtime(self, now: float) -> bool:
        return (
            self.max_runtime is not None
            and self.started_at is not None
            and now - self.started_at > self.max_runtime
        )

    def watched(self) -> Watched:
        return Watched(self.attempt_id, self.job_id, self.number, self.handle)


class ActiveAttempts:
    """Attempt id -> the attempt, for the attempts launched and not seen ending yet."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self._by_id: dict[int, ActiveAttempt] = {}
        # told an attempt's id and its job's once it is forgotten (per-attempt memories)
        self.on_forget: list[Callable[[int, int], None]] = []

    def __iter__(self) -> Iterator[ActiveAttempt]:
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._by_id

    def ids(self) -> list[int]:
        return list(self._by_id)

    def get(self, attempt_id: int) -> ActiveAttempt | None:
        return self._by_id.get(attempt_id)

    def __getitem__(self, attempt_id: int) -> ActiveAttempt:
        return self._by_id[attempt_id]

    def add(self, active: ActiveAttempt) -> None:
        self._by_id[active.attempt_id] = active

    def by_job(self) -> dict[int, list[ActiveAttempt]]:
        found: dict[int, list[ActiveAttempt]] = {}
        for active in self._by_id.values():
            found.setdefault(active.job_id, []).append(active)
        return found

    def forget(self, active: ActiveAttempt) -> None:
        """Its end is recorded: stop watching it, and let the executor free what it held."""
        self._by_id.pop(active.attempt_id, None)
        for told in self.on_forget:
            told(active.attempt_id, active.job_id)
        self.executor.release(active.handle)
