"""Notebooks: start, list, show, stop, resume; idle GPUs.

A notebook is seen by its team (as its job is), stopped by its team's members and the
pool's admins, and resumed and opened by its owner alone: opening one runs code as its
owner, so nobody else, admins included, is let in (they get NotFound, as for what does not
exist). Each start or resume submits a job of kind notebook through the jobs service, so
quotas, fair share, the scheduler and the sandbox apply; the job runs JupyterLab in the
owner's workspace, with a new token that only the server and the job know.

The functions that take a port of the server (``Writes``, ``Submits``, ``NotebookStops``)
are what the API calls; those that take a ``Session`` are the steps they (and the idle
watch, ``_idleness``) are made of.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobKind, JobSpec, JobStatus, Reason, ResourceRequest
from gpupool.domain.notebooks import (
    IdleGpuView,
    NotebookRequest,
    NotebookState,
    NotebookView,
    StopCause,
    base_path,
    ended_message,
    launch_command,
    stopped_by_message,
)
from gpupool.errors import NotebookActive, NotFound
from gpupool.scheduler.types import NodeCapacity
from gpupool.services import jobs as job_service
from gpupool.services.core import Principal, Submits, Writes
from gpupool.services.notebooks._ports import NotebookStops
from gpupool.store.models import JobModel, NotebookModel

MAX_LIST = 500
LIVE = (JobStatus.PENDING.value, JobStatus.STARTING.value, JobStatus.RUNNING.value)
SHOWN_STATE = {
    JobStatus.PENDING.value: NotebookState.PENDING,
    JobStatus.STARTING.value: NotebookState.STARTING,
    JobStatus.RUNNING.value: NotebookState.RUNNING,
}


# -- what the API calls ------------------------------------------------------------------------


def start_notebook(ctx: Submits, who: Principal, request: NotebookRequest) -> NotebookView:
    """Record a notebook and queue its job; the control loop starts it."""
    nodes, now = ctx.loop.recent_nodes(), ctx.clock.now()
    limits = job_service.JobLimits.of(ctx.settings)
    with ctx.db.session() as session:
        notebook = start(session, who, request, nodes, now, limits)
        shown = view(notebook, session.get(JobModel, notebook.job_id), now)
    ctx.loop.wake()
    return shown


def list_notebooks(ctx: Writes, who: Principal, mine: bool = False) -> list[NotebookView]:
    """The notebooks of the caller's teams (every team's, for admins), newest first."""
    now = ctx.clock.now()
    with ctx.db.reader() as session:
        query = select(NotebookModel).order_by(NotebookModel.id.desc()).limit(MAX_LIST)
        if not who.is_admin:
            query = query.where(NotebookModel.team_id.in_(who.team_ids or {-1}))
        if mine:
            query = query.where(NotebookModel.user_id == who.user_id)
        found = list(session.scalars(query))
        jobs = _jobs_of(session, found)
        return [view(notebook, jobs.get(notebook.job_id), now) for notebook in found]


def show_notebook(ctx: Writes, who: Principal, notebook_id: int) -> NotebookView:
    with ctx.db.reader() as session:
        notebook = visible(session, who, notebook_id)
        return view(notebook, _job(session, notebook), ctx.clock.now())


def stop_notebook(ctx: NotebookStops, who: Principal, notebook_id: int) -> NotebookView:
    """Stop the notebook's job (SIGTERM, then SIGKILL after its grace): its files stay; the
    proxy no longer reaches it once this returns."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        notebook = visible(session, who, notebook_id)
        who.require_member()
        if notebook.stopped_at is None:
            stop(session, notebook, now, StopCause.USER, stopped_by_message(who.name))
        shown = view(notebook, _job(session, notebook), now)
    ctx.notebooks.changed(notebook_id)
    ctx.loop.wake()
    return shown


def resume_notebook(ctx: Submits, who: Principal, notebook_id: int) -> NotebookView:
    """Start a stopped notebook again, in the same workspace, with a new job and token."""
    nodes, now = ctx.loop.recent_nodes(), ctx.clock.now()
    limits = job_service.JobLimits.of(ctx.settings)
    with ctx.db.session() as session:
        notebook = owned(session, who, notebook_id)
        job = _job(session, notebook)
        if job is not None and job.status in LIVE:
            doing = "still stopping" if notebook.stopped_at is not None else "running"
            raise NotebookActive(f"notebook {notebook_id} is {doing}: nothing to resume")
        launch(session, who, notebook, notebook.team.name, nodes, now, limits)
        shown = view(notebook, session.get(JobModel, notebook.job_id), now)
    ctx.loop.wake()
    return shown


def idle_gpus(ctx: Submits, who: Principal, shown_after: float) -> list[IdleGpuView]:
    """Admins: the running notebooks that hold GPUs and have been idle for more than
    ``shown_after`` seconds, the longest idle first."""
    who.require_admin()
    now, limit = ctx.clock.now(), ctx.settings.notebook_idle_seconds
    with ctx.db.reader() as session:
        rows = session.execute(
            select(NotebookModel, JobModel)
            .join(JobModel, JobModel.id == NotebookModel.job_id)
            .where(NotebookModel.stopped_at.is_(None), JobModel.status == "running")
        ).all()
        found = [_idle_gpu(nb, job, now, limit) for nb, job in rows if job.gpus > 0]
    held = [f for f in found if f.idle_seconds > shown_after]
    return sorted(held, key=lambda f: -f.idle_seconds)


# -- the steps, in a caller's transaction ------------------------------------------------------


def start(
    session: Session,
    who: Principal,
    request: NotebookRequest,
    nodes: Sequence[NodeCapacity],
    now: float,
    limits: job_service.JobLimits,
) -> NotebookModel:
    """A new notebook of ``who`` and its first job (the checks of any submit apply)."""
    probe = _spec(
        0, request.name, request.resources, request.team, request.gpu_types, request.environment
    )
    team = job_service.admit(session, who, probe, nodes, limits)
    notebook = NotebookModel(
        name=request.name,
        user_id=who.user_id,
        team_id=team.id,
        resources=request.resources.model_dump(mode="json"),
        gpu_types=list(request.gpu_types),
        environment=request.environment,
        created_at=now,
    )
    session.add(notebook)
    session.flush()
    launch(session, who, notebook, team.name, nodes, now, limits)
    return notebook


def launch(
    session: Session,
    who: Principal,
    notebook: NotebookModel,
    team: str,
    nodes: Sequence[NodeCapacity],
    now: float,
    limits: job_service.JobLimits,
) -> None:
    """Submit the notebook's job, with a new token (given to JupyterLab at launch)."""
    resources = ResourceRequest.model_validate(notebook.resources)
    spec = _spec(
        notebook.id, notebook.name, resources, team, notebook.gpu_types or [], notebook.environment
    )
    job = job_service.submit(session, who, spec, nodes, now, limits, kind=JobKind.NOTEBOOK)
    notebook.job_id, notebook.token, notebook.started_at = job.id, secrets.token_urlsafe(32), now
    notebook.active_at = None
    notebook.stopped_at = notebook.stop_reason = notebook.stop_message = None


def stop(
    session: Session, notebook: NotebookModel, now: float, cause: StopCause, message: str
) -> None:
    """Record the notebook stopped and ask the control loop to stop its job (a pending job
    is cancelled at once); its job's events say why."""
    notebook.stopped_at, notebook.stop_reason, notebook.stop_message = now, cause.value, message
    notebook.token = None
    if notebook.job_id is not None:
        end_job(session, notebook.job_id, now, message)


def end_job(session: Session, job_id: int, now: float, message: str) -> None:
    job_service.record(session, job_id, now, Reason.NOTEBOOK_STOPPED, message)
    job_service.flag_cancel(session, job_id, now)
    job_service.cancel_pending(session, job_id, now, message)


def settle(session: Session, now: float) -> int:
    """Record as stopped the notebooks whose job ended by itself; how many there were."""
    rows = session.execute(
        select(NotebookModel, JobModel)
        .join(JobModel, JobModel.id == NotebookModel.job_id)
        .where(NotebookModel.stopped_at.is_(None), JobModel.status.not_in(LIVE))
    ).all()
    for notebook, job in rows:
        notebook.stopped_at = job.ended_at or now
        notebook.stop_reason = StopCause.ENDED.value
        notebook.stop_message = ended_message(job.status, job.message)
        notebook.token = None
    return len(rows)


def visible(session: Session, who: Principal, notebook_id: int) -> NotebookModel:
    """The notebook, or NotFound when it does not exist or its team is not the caller's."""
    notebook = session.get(NotebookModel, notebook_id)
    if notebook is None or not who.can_see_team(notebook.team_id):
        raise NotFound(f"no notebook {notebook_id}: list yours with 'gpupool notebook ls'")
    return notebook


def owned(session: Session, who: Principal, notebook_id: int) -> NotebookModel:
    """The caller's own notebook, or NotFound (for everyone else, admins included, and for
    its owner once no longer in its team)."""
    notebook = session.get(NotebookModel, notebook_id)
    mine = notebook is not None and notebook.user_id == who.user_id
    if not mine or not who.can_see_team(notebook.team_id):
        raise NotFound(not_yours(notebook_id))
    return notebook


def not_yours(notebook_id: int) -> str:
    return (
        f"no notebook {notebook_id} of yours: only its owner may open or resume a "
        "notebook; list yours with 'gpupool notebook ls'"
    )


def view(notebook: NotebookModel, job: JobModel | None, now: float) -> NotebookView:
    state = shown_state(notebook, job)
    active = active_since(notebook, job)
    return NotebookView(
        id=notebook.id,
        name=notebook.name,
        user=notebook.user.name,
        team=notebook.team.name,
        state=state,
        resources=ResourceRequest.model_validate(notebook.resources),
        gpu_types=notebook.gpu_types or [],
        environment=notebook.environment,
        job_id=notebook.job_id,
        job_status=job.status if job is not None else None,
        message=_message(notebook, job, state),
        stop_reason=notebook.stop_reason,
        created_at=notebook.created_at,
        started_at=notebook.started_at,
        stopped_at=notebook.stopped_at,
        active_at=notebook.active_at,
        idle_seconds=max(0.0, now - active) if _watched(state, job) and active else None,
        url=base_path(notebook.id) + "lab",
    )


def shown_state(notebook: NotebookModel, job: JobModel | None) -> NotebookState:
    live = job is not None and job.status in LIVE
    if notebook.stopped_at is not None:
        return NotebookState.STOPPING if live else NotebookState.STOPPED
    return SHOWN_STATE[job.status] if live else NotebookState.STOPPED


# -- helpers -----------------------------------------------------------------------------------


def _spec(
    notebook_id: int,
    name: str | None,
    resources: ResourceRequest,
    team: str | None,
    gpu_types: list[str],
    environment: str | None = None,
) -> JobSpec:
    return JobSpec(
        name=name or f"notebook-{notebook_id}",
        command=launch_command(sys.executable, notebook_id),
        resources=resources,
        team=team,
        gpu_types=gpu_types,
        environment=environment,
        preemptible=False,  # a person works in it: never stopped for another job
        listen=True,
        workspace=True,
    )


def _job(session: Session, notebook: NotebookModel) -> JobModel | None:
    return session.get(JobModel, notebook.job_id) if notebook.job_id is not None else None


def _jobs_of(session: Session, notebooks: list[NotebookModel]) -> dict[int, JobModel]:
    ids = [n.job_id for n in notebooks if n.job_id is not None]
    if not ids:
        return {}
    return {job.id: job for job in session.scalars(select(JobModel).where(JobModel.id.in_(ids)))}


def active_since(notebook: NotebookModel, job: JobModel | None) -> float | None:
    """Its last activity the watch saw, else when its job started running."""
    started = job.started_at if job is not None else None
    seen = [t for t in (notebook.active_at, started) if t is not None]
    return max(seen) if seen else None


def _message(notebook: NotebookModel, job: JobModel | None, state: NotebookState) -> str | None:
    if notebook.stopped_at is not None:
        return notebook.stop_message
    if state == NotebookState.STOPPED and job is not None:
        return ended_message(job.status, job.message)
    if state == NotebookState.PENDING and job is not None:
        return job.message
    return None


def _watched(state: NotebookState, job: JobModel | None) -> bool:
    """The idle watch looks at it (running, with GPUs): its idle time is known."""
    return state == NotebookState.RUNNING and job is not None and job.gpus > 0


def _not_serving(shown: NotebookView) -> str:
    if shown.state in (NotebookState.STOPPED, NotebookState.STOPPING):
        why = f": {shown.message}" if shown.message else ""
        return f"notebook {shown.id} is {shown.state.value}{why}"
    return f"notebook {shown.id} is {shown.state.value}: it serves once its JupyterLab runs"


def _idle_gpu(notebook: NotebookModel, job: JobModel, now: float, limit: float) -> IdleGpuView:
    idle = max(0.0, now - (active_since(notebook, job) or now))
    return IdleGpuView(
        notebook_id=notebook.id,
        name=notebook.name,
        user=notebook.user.name,
        team=notebook.team.name,
        gpus=job.gpus,
        node=job.node,
        idle_seconds=idle,
        released_in_seconds=max(0.0, limit - idle),
    )
