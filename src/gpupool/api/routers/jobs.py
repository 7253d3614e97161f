"""Jobs: submit, list, show, cancel, events, logs (JSON chunks and a live event stream);
job arrays: submitted as one, listed, shown and cancelled as one or task by task."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi import Path as FastApiPath
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpupool.api.deps import MAX_ID, Id, Offset, Platform, PlatformDep, PrincipalDep
from gpupool.api.schemas import (
    ArrayOut,
    ArraySubmitted,
    AttemptOut,
    EventOut,
    JobDetailOut,
    JobOut,
    JobSubmit,
    LogChunk,
    QueuedJobOut,
    QueueOut,
    QueueTeamOut,
    WhyOut,
)
from gpupool.domain.arrays import MAX_ARRAY_INDEX
from gpupool.domain.jobs import JobStatus
from gpupool.scheduler.types import PendingReason
from gpupool.services import arrays, eta, jobs, logs, why
from gpupool.services.access import Principal

router = APIRouter(prefix="/jobs", tags=["jobs"])
STREAM_TICK = 0.25


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobOut | ArraySubmitted)
async def submit(body: JobSubmit, ctx: PlatformDep, who: PrincipalDep) -> JobOut | ArraySubmitted:
    """Queue a job; with ``array``, a job array in one transaction (the array comes back)."""
    return await run_in_threadpool(_submit, ctx, who, body)


def _submit(ctx: Platform, who: Principal, body: JobSubmit) -> JobOut | ArraySubmitted:
    capacities = ctx.loop.snapshots.nodes.recent(ctx.db)
    spec, now, limits = body.job_spec(), ctx.clock.now(), jobs.JobLimits.of(ctx.settings)
    with ctx.db.session() as session:
        if body.array is None:
            out = JobOut.of(jobs.submit(session, who, spec, capacities, now, limits), user=who.name)
        else:
            most = ctx.settings.max_array_tasks
            made = arrays.submit(session, who, spec, body.array, capacities, now, limits, most)
            out = ArraySubmitted.of(made.summary, job_ids=made.job_ids)
    ctx.loop.wake()
    return out


@router.get("", response_model=list[JobOut])
def list_jobs(
    ctx: PlatformDep,
    who: PrincipalDep,
    status: Annotated[list[JobStatus] | None, Query()] = None,
    team: Annotated[str | None, Query(max_length=100)] = None,
    user: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=jobs.MAX_LIST)] = 100,
    array: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="only this array's tasks, by index")
    ] = None,
    array_tasks: Annotated[
        bool, Query(description="false: leave out arrays' tasks (GET /jobs/arrays lists them)")
    ] = True,
) -> list[JobOut]:
    where = jobs.JobFilter(status or (), team, user, limit, array, array_tasks)
    with ctx.db.reader() as session:
        found = jobs.list_jobs(session, who, where)
        now = ctx.clock.now()
        return [JobOut.of(job, _waiting(ctx, job.id), now=now) for job in found]


@router.get("/arrays", response_model=list[ArrayOut])
def list_arrays(
    ctx: PlatformDep,
    who: PrincipalDep,
    status: Annotated[list[JobStatus] | None, Query()] = None,
    team: Annotated[str | None, Query(max_length=100)] = None,
    user: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=jobs.MAX_LIST)] = 100,
) -> list[ArrayOut]:
    """Job arrays, newest first, each with its tasks counted by status; ``status``: only
    arrays with a task in one of these."""
    where = jobs.JobFilter(status=status or (), team=team, user=user, limit=limit)
    with ctx.db.reader() as session:
        return [ArrayOut.of(found) for found in arrays.list_arrays(session, who, where)]


@router.get("/arrays/{array_id}", response_model=ArrayOut)
def show_array(array_id: Id, ctx: PlatformDep, who: PrincipalDep) -> ArrayOut:
    with ctx.db.reader() as session:
        return ArrayOut.of(arrays.get(session, who, array_id))


@router.get("/arrays/{array_id}/tasks/{index}", response_model=JobOut)
def show_task(
    array_id: Id,
    index: Annotated[int, FastApiPath(ge=0, le=MAX_ARRAY_INDEX)],
    ctx: PlatformDep,
    who: PrincipalDep,
) -> JobOut:
    """The task of ``index`` of the array (``ID_INDEX``)."""
    with ctx.db.reader() as session:
        job = arrays.task(session, who, array_id, index)
        return JobOut.of(job, _waiting(ctx, job.id), now=ctx.clock.now())


@router.post("/arrays/{array_id}/cancel", response_model=ArrayOut)
def cancel_array(array_id: Id, ctx: PlatformDep, who: PrincipalDep) -> ArrayOut:
    """Cancel every task not ended: pending ones at once, running ones are stopped."""
    with ctx.db.session() as session:
        out = ArrayOut.of(arrays.cancel(session, who, array_id, ctx.clock.now()))
    ctx.loop.wake()
    return out


@router.get("/queue", response_model=QueueOut)
def show_queue(ctx: PlatformDep, who: PrincipalDep) -> QueueOut:
    """Pending jobs of the teams you can see, by team, in queue order, with estimated starts."""
    reasons = ctx.loop.pending_reasons
    forecast = _forecast(ctx)
    assumes = eta.assumptions(forecast.bounds)
    with ctx.db.reader() as session:
        teams, waiting = why.queue(session, who, reasons, forecast, assumes)
        return QueueOut(
            computed_at=forecast.computed_at,
            assumes=assumes,
            waiting=waiting,
            teams=[
                QueueTeamOut(team=t.team, jobs=[_queued(job, w) for job, w in t.jobs])
                for t in teams
            ],
        )


@router.get("/{job_id}/why", response_model=WhyOut)
def show_why(job_id: Id, ctx: PlatformDep, who: PrincipalDep) -> WhyOut:
    """Why the job waits: reason, queue position, blockers and an estimated start time."""
    with ctx.db.reader() as session:
        pending = jobs.get_job(session, who, job_id).status == JobStatus.PENDING.value
    forecast = _forecast(ctx, job_id) if pending else None  # the only slow part, if any
    estimate = forecast.estimate(job_id) if forecast else None
    assumes = eta.assumptions(forecast.bounds) if forecast else ()
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, job_id)
        return WhyOut.of(why.explain(job, _waiting(ctx, job_id), estimate, assumes))


@router.get("/{job_id}", response_model=JobDetailOut)
def show(job_id: Id, ctx: PlatformDep, who: PrincipalDep) -> JobDetailOut:
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, job_id)
        base = JobOut.of(job, _waiting(ctx, job_id), now=ctx.clock.now()).model_dump()
        events = [EventOut.of(e) for e in jobs.events(session, job_id)]
        tries = [
            AttemptOut.model_validate(a, from_attributes=True)
            for a in jobs.attempts(session, job_id)
        ]
    return JobDetailOut(**base, events=events, attempts_detail=tries)


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: Id, ctx: PlatformDep, who: PrincipalDep) -> JobOut:
    with ctx.db.session() as session:
        now = ctx.clock.now()
        out = JobOut.of(jobs.cancel(session, who, job_id, now), now=now)
    ctx.loop.wake()
    return out


@router.get("/{job_id}/events", response_model=list[EventOut])
def events(
    job_id: Id,
    ctx: PlatformDep,
    who: PrincipalDep,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="only events after this id")] = 0,
) -> list[EventOut]:
    with ctx.db.reader() as session:
        jobs.get_job(session, who, job_id)
        return [EventOut.of(e) for e in jobs.events(session, job_id, after)]


@router.get("/{job_id}/logs", response_model=LogChunk)
def read_logs(
    job_id: Id,
    ctx: PlatformDep,
    who: PrincipalDep,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=logs.MAX_CHUNK)] = logs.MAX_CHUNK,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> LogChunk:
    """One attempt's log (default: the latest) from ``offset``; ``next_attempt`` says where a
    reader that follows the job goes once this log is read to its end."""
    chunk, place, final = _read(ctx, who, job_id, attempt, offset, limit)
    complete = final and place.next_attempt is None and chunk.next_offset == chunk.offset
    return LogChunk(
        job_id=job_id,
        complete=complete,
        next_attempt=place.next_attempt,
        note=place.note,
        **chunk.__dict__,
    )


@router.get("/{job_id}/logs/stream", response_class=StreamingResponse)
async def stream_logs(
    job_id: Id,
    request: Request,
    ctx: PlatformDep,
    who: PrincipalDep,
    offset: Offset = 0,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    follow: bool = True,
) -> StreamingResponse:
    """Server-Sent Events: ``attempt`` (which attempt's log follows, and its note), ``log``
    (text), ``status`` (the job's status), then ``end``. It starts at ``attempt`` (default: the
    latest) and, with ``follow``, goes on to each later attempt from its start."""
    await run_in_threadpool(_read, ctx, who, job_id, attempt, offset, 1)  # 404 before streaming
    stream = _events(request, ctx, who, job_id, _Cursor(attempt, offset, follow))
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


@dataclass
class _Cursor:
    """Where a stream reads: an attempt (None: the latest, until one is known) and an offset."""

    attempt: int | None
    offset: int
    follow: bool
    announced: int | None = None


async def _events(
    request: Request, ctx: Platform, who: Principal, job_id: Id, at: _Cursor
) -> AsyncIterator[str]:
    last_status = None
    while not await request.is_disconnected():
        chunk, place, final = await run_in_threadpool(
            _read, ctx, who, job_id, at.attempt, at.offset, logs.MAX_CHUNK
        )
        at.attempt = place.attempt  # kept once known: a new attempt's log starts at 0
        if place.attempt is not None and place.attempt != at.announced:
            yield _sse("attempt", {"attempt": place.attempt, "note": place.note})
            at.announced = place.attempt
        if chunk.text:
            data = {"attempt": chunk.attempt, "offset": chunk.offset, "text": chunk.text}
            yield _sse("log", data | {"next_offset": chunk.next_offset})
            at.offset = chunk.next_offset
        current = await run_in_threadpool(_status, ctx, who, job_id)
        if current != last_status:
            yield _sse("status", current)
            last_status = current
        if chunk.text:
            continue
        if place.next_attempt is not None and at.follow:
            at.attempt, at.offset = place.next_attempt, 0
            continue
        if final or place.next_attempt is not None:  # this log will not grow any more
            yield _sse("end", {"attempt": at.attempt, "next_offset": at.offset})
            return
        await asyncio.sleep(STREAM_TICK)


def _read(
    ctx: Platform, who: Principal, job_id: Id, attempt: int | None, offset: int, limit: int
) -> tuple[logs.Chunk, logs.LogPlace, bool]:
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, job_id)
        logs.check_attempt(job_id, job.attempts, attempt)
        final = JobStatus(job.status).is_final
        place = logs.locate(session, ctx.executor, job_id, attempt)
    return logs.read_chunk(place.path, place.attempt, offset, limit), place, final


def _status(ctx: Platform, who: Principal, job_id: int) -> dict:
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, job_id)
        return {
            "status": job.status,
            "reason": job.reason,
            "message": job.message,
            "exit_code": job.exit_code,
        }


def _waiting(ctx: Platform, job_id: int) -> PendingReason | None:
    return ctx.loop.pending_reasons.get(job_id)


def _forecast(ctx: Platform, job_id: int | None = None) -> eta.Forecast:
    return ctx.loop.etas.forecast(ctx.db, ctx.clock.now(), ctx.loop.pending_reasons, job_id)


def _queued(job, answer: why.Why) -> QueuedJobOut:  # noqa: ANN001
    resources = job.spec.get("resources") or {}
    return QueuedJobOut(
        id=job.id,
        name=job.name,
        user=job.user.name,
        priority=job.priority,
        gpus=resources.get("gpus"),
        gpu_memory_bytes=resources.get("gpu_memory_bytes"),
        submitted_at=job.submitted_at,
        code=answer.code,
        message=answer.message,
        position=answer.position,
        blockers=list(answer.blockers),
        eta=answer.eta,
        eta_unknown=answer.eta_unknown,
    )


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
