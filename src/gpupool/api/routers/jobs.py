"""Jobs: submit, list, show, cancel, events, logs (JSON chunks and a live event stream)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpupool.api.deps import MAX_ID, Id, Offset, Platform, PlatformDep, PrincipalDep
from gpupool.api.schemas import (
    AttemptOut,
    EventOut,
    JobDetailOut,
    JobOut,
    LogChunk,
    QueuedJobOut,
    QueueOut,
    QueueTeamOut,
    WhyOut,
)
from gpupool.domain.jobs import JobSpec, JobStatus
from gpupool.scheduler.types import PendingReason
from gpupool.services import eta, jobs, logs, why
from gpupool.services.access import Principal

router = APIRouter(prefix="/jobs", tags=["jobs"])
STREAM_TICK = 0.25


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobOut)
async def submit(spec: JobSpec, ctx: PlatformDep, who: PrincipalDep) -> JobOut:
    return await run_in_threadpool(_submit, ctx, who, spec)


def _submit(ctx: Platform, who: Principal, spec: JobSpec) -> JobOut:
    capacities = ctx.loop.snapshots.nodes.recent(ctx.db)
    with ctx.db.session() as session:
        limits = jobs.JobLimits.of(ctx.settings)
        job = jobs.submit(session, who, spec, capacities, ctx.clock.now(), limits)
        out = JobOut.of(job, user=who.name)
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
) -> list[JobOut]:
    where = jobs.JobFilter(status=status or (), team=team, user=user, limit=limit)
    with ctx.db.reader() as session:
        found = jobs.list_jobs(session, who, where)
        return [JobOut.of(job, _waiting(ctx, job.id)) for job in found]


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
        base = JobOut.of(job, _waiting(ctx, job_id)).model_dump()
        events = [EventOut.of(e) for e in jobs.events(session, job_id)]
        tries = [
            AttemptOut.model_validate(a, from_attributes=True)
            for a in jobs.attempts(session, job_id)
        ]
    return JobDetailOut(**base, events=events, attempts_detail=tries)


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: Id, ctx: PlatformDep, who: PrincipalDep) -> JobOut:
    with ctx.db.session() as session:
        out = JobOut.of(jobs.cancel(session, who, job_id, ctx.clock.now()))
    ctx.loop.wake()
    return out


@router.get("/{job_id}/events", response_model=list[EventOut])
def events(job_id: Id, ctx: PlatformDep, who: PrincipalDep, after: Offset = 0) -> list[EventOut]:
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
    chunk, final = _read(ctx, who, job_id, attempt, offset, limit)
    complete = final and chunk.next_offset == chunk.offset
    return LogChunk(job_id=job_id, complete=complete, **chunk.__dict__)


@router.get("/{job_id}/logs/stream", response_class=StreamingResponse)
async def stream_logs(
    job_id: Id,
    request: Request,
    ctx: PlatformDep,
    who: PrincipalDep,
    offset: Offset = 0,
) -> StreamingResponse:
    """Server-Sent Events: ``log`` (text), ``status`` (the job's status), then ``end``."""
    await run_in_threadpool(_read, ctx, who, job_id, None, offset, 1)  # 404 before streaming
    stream = _events(request, ctx, who, job_id, offset)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def _events(
    request: Request, ctx: Platform, who: Principal, job_id: Id, offset: int
) -> AsyncIterator[str]:
    last_status, attempt = None, None
    while not await request.is_disconnected():
        chunk, final = await run_in_threadpool(
            _read, ctx, who, job_id, None, offset, logs.MAX_CHUNK
        )
        if attempt is not None and chunk.attempt != attempt:  # requeued: a new log begins
            offset = 0
            chunk, final = await run_in_threadpool(
                _read, ctx, who, job_id, None, offset, logs.MAX_CHUNK
            )
        attempt = chunk.attempt if chunk.attempt is not None else attempt
        if chunk.text:
            data = {"attempt": chunk.attempt, "offset": chunk.offset, "text": chunk.text}
            yield _sse("log", data | {"next_offset": chunk.next_offset})
        offset = chunk.next_offset
        current = await run_in_threadpool(_status, ctx, who, job_id)
        if current != last_status:
            yield _sse("status", current)
            last_status = current
        if final and not chunk.text:
            yield _sse("end", {"next_offset": offset})
            return
        if not chunk.text:
            await asyncio.sleep(STREAM_TICK)


def _read(
    ctx: Platform, who: Principal, job_id: Id, attempt: int | None, offset: int, limit: int
) -> tuple[logs.Chunk, bool]:
    with ctx.db.reader() as session:
        job = jobs.get_job(session, who, job_id)
        final = JobStatus(job.status).is_final
        number, path = logs.log_file(session, ctx.executor, job_id, attempt)
    return logs.read_chunk(path, number, offset, limit), final


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
