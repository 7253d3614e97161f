"""How this pool keeps jobs apart: the sandbox, whose account a job runs under."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.isolation import IsolationStatus
from gpupool.services.core import Principal

router = APIRouter(tags=["nodes"])


@router.get("/isolation", response_model=IsolationStatus | None)
def isolation(
    ctx: PlatformDep, _who: Annotated[Principal, allow(Rule.SIGNED_IN)]
) -> IsolationStatus | None:
    """Any signed-in user: whether jobs run sandboxed, as whom, and whether they run at all
    (isolation on but unavailable: no job starts, and the message says what to install)."""
    return ctx.isolation()
