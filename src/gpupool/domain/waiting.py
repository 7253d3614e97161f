"""Why a pending job waits: the scheduler's word on it, which the API shows as it is."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.jobs import Reason


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job still waits: a PascalCase code, a message for people, its queue position."""

    job_id: int
    code: Reason
    message: str
    position: int
    blockers: tuple[str, ...] = ()
    eta: float | None = None  # when its reserved spot is expected to be free
