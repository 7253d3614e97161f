"""Jobs: submit, list, show, cancel, hold and release, events, logs (JSON chunks and a live
event stream); job arrays: submitted as one, listed, shown and cancelled as one or task by
task."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status
from fastapi import Path as FastApiPath
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpupool.api.access import Rule, allow
from gpupool.api.deps import MAX_ID, Id, Offset, PlatformDep
from gpupool.api.schemas import JobSubmit
from gpupool.domain.arrays import MAX_ARRAY_INDEX
from gpupool.domain.jobs import JobStatus
from gpupool.domain.views import (
    ArrayView,
    EventView,
    JobDetailView,
    JobView,
    LogChunkView,
    QueueView,
    SubmittedArrayView,
    WhyView,
)
from gpupool.services import jobs, scheduling
from gpupool.services.core import Principal
from gpupool.services.platform import Platform

router = APIRouter(prefix="/jobs", tags=["jobs"])
STREAM_TICK = 0.25  # seconds between reads of a log that has nothing new

Statuses = Annotated[list[JobStatus] | None, Query()]
Name = Annotated[str | None, Query(max_length=100)]
Limit = Annotated[int, Query(ge=1, le=jobs.MAX_LIST)]
ArrayIndex = Annotated[int, FastApiPath(ge=0, le=MAX_ARRAY_INDEX)]
Attempt = Annotated[int | None, Query(ge=1, le=MAX_ID)]
Rank = Annotated[
    int | None,
    Query(
        ge=0,
        le=jobs.MAX_RANK,
        description="only the lines of this rank of a distributed job ('[rank N] '), "
        "prefix removed; offsets stay those of the whole log",
    ),
]
Task = Annotated[
    int | None,
    Query(
        ge=0,
        le=jobs.MAX_RANK,
        description="only the lines of this task ('[task N] '), prefix removed; not with rank",
    ),
]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobView | SubmittedArrayView)
def submit(
    body: JobSubmit, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> JobView | SubmittedArrayView:
    """Queue a job; with ``array``, a job array in one transaction (the array comes back)."""
    if body.array is None:
        return jobs.submit_job(ctx, who, body.job_spec())
    return jobs.submit_array(ctx, who, body.job_spec(), body.array)


@router.get("", response_model=list[JobView])
def list_jobs(
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.SIGNED_IN)],
    status: Statuses = None,
    team: Name = None,
    user: Name = None,
    limit: Limit = 100,
    array: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="only this array's tasks, by index")
    ] = None,
    array_tasks: Annotated[
        bool, Query(description="false: leave out arrays' tasks (GET /jobs/arrays lists them)")
    ] = True,
) -> list[JobView]:
    """The jobs of your teams (every team's, for admins), newest first."""
    where = jobs.JobFilter(status or (), team, user, limit, array, array_tasks)
    return jobs.list_jobs(ctx, who, where)


@router.get("/arrays", response_model=list[ArrayView])
def list_arrays(
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.SIGNED_IN)],
    status: Statuses = None,
    team: Name = None,
    user: Name = None,
    limit: Limit = 100,
) -> list[ArrayView]:
    """Job arrays, newest first, each with its tasks counted by status; ``status``: only
    arrays with a task in one of these."""
    where = jobs.JobFilter(status=status or (), team=team, user=user, limit=limit)
    return jobs.list_arrays(ctx, who, where)


@router.get("/arrays/{array_id}", response_model=ArrayView)
def show_array(
    array_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_READ)]
) -> ArrayView:
    return jobs.show_array(ctx, who, array_id)


@router.get("/arrays/{array_id}/tasks/{index}", response_model=JobView)
def show_task(
    array_id: Id,
    index: ArrayIndex,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
) -> JobView:
    """The task of ``index`` of the array (``ID_INDEX``)."""
    return jobs.show_task(ctx, who, array_id, index)


@router.post("/arrays/{array_id}/cancel", response_model=ArrayView)
def cancel_array(
    array_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> ArrayView:
    """Cancel every task not ended: pending ones at once, running ones are stopped."""
    return jobs.cancel_array(ctx, who, array_id)


@router.get("/queue", response_model=QueueView)
def show_queue(ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SIGNED_IN)]) -> QueueView:
    """Pending jobs of the teams you can see, by team, in queue order, with estimated starts."""
    return scheduling.show_queue(ctx, who)


@router.get("/{job_id}/why", response_model=WhyView)
def show_why(
    job_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_READ)]
) -> WhyView:
    """Why the job waits: reason, queue position, blockers and an estimated start time."""
    return scheduling.why_waits(ctx, who, job_id)


@router.get("/{job_id}", response_model=JobDetailView)
def show(
    job_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_READ)]
) -> JobDetailView:
    """The job, its events and its attempts."""
    return jobs.show_job(ctx, who, job_id)


@router.post("/{job_id}/cancel", response_model=JobView)
def cancel(
    job_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> JobView:
    """Cancel the job: a pending one at once, a running one is stopped."""
    return jobs.cancel_job(ctx, who, job_id)


@router.post("/{job_id}/hold", response_model=JobView)
def hold(
    job_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> JobView:
    """Hold a pending job (Slurm's scontrol hold): it stays pending, reason Held, and never
    starts until released; a held job stays as it is, any other is a 409."""
    return jobs.hold_job(ctx, who, job_id)


@router.post("/{job_id}/release", response_model=JobView)
def release(
    job_id: Id, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.TEAM_WRITE)]
) -> JobView:
    """Release a held job back to the queue (or to waiting for the jobs it depends on); a
    pending job not held stays as it is, one no longer pending is a 409."""
    return jobs.release_job(ctx, who, job_id)


@router.get("/{job_id}/events", response_model=list[EventView])
def events(
    job_id: Id,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="only events after this id")] = 0,
) -> list[EventView]:
    return jobs.job_events(ctx, who, job_id, after)


@router.get("/{job_id}/logs", response_model=LogChunkView)
def read_logs(
    job_id: Id,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=jobs.MAX_CHUNK)] = jobs.MAX_CHUNK,
    attempt: Attempt = None,
    rank: Rank = None,
    task: Task = None,
) -> LogChunkView:
    """One attempt's log (default: the latest) from ``offset``; ``next_attempt`` says where a
    reader that follows the job goes once this log is read to its end. With ``rank`` (or
    ``task``): whole lines of that rank only, without their prefix; ``next_offset`` may then
    move on with empty text, and the log is read to its end once it stops moving."""
    lines = jobs.LineFilter(rank, task)
    return jobs.read_log(ctx, who, job_id, attempt, offset, limit, lines)


@router.get("/{job_id}/logs/stream", response_class=StreamingResponse)
async def stream_logs(
    job_id: Id,
    request: Request,
    ctx: PlatformDep,
    who: Annotated[Principal, allow(Rule.TEAM_READ)],
    offset: Offset = 0,
    attempt: Attempt = None,
    follow: bool = True,
    rank: Rank = None,
    task: Task = None,
) -> StreamingResponse:
    """Server-Sent Events: ``attempt`` (which attempt's log follows, and its note), ``log``
    (text), ``status`` (the job's status), then ``end``. It starts at ``attempt`` (default: the
    latest) and, with ``follow``, goes on to each later attempt from its start. With ``rank``
    (or ``task``), only that rank's lines, as ``GET .../logs`` gives them."""
    lines = jobs.LineFilter(rank, task)
    cursor = await run_in_threadpool(
        jobs.open_log, ctx, who, job_id, attempt, offset, follow, lines
    )
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    stream = _events(request, ctx, who, cursor)
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def _events(
    request: Request, ctx: Platform, who: Principal, cursor: jobs.LogCursor
) -> AsyncIterator[str]:
    """The service's steps as Server-Sent Events, until the log ends or the client leaves."""
    while not await request.is_disconnected():
        step = await run_in_threadpool(jobs.follow_step, ctx, who, cursor)
        for name, data in step.events:
            yield _sse(name, data)
        if step.done:
            return
        if step.idle:
            await asyncio.sleep(STREAM_TICK)


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
