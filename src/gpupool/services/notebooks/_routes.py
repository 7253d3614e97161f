"""Where the proxy reaches a notebook: its route in the proxy's table, and who may use it.

Each notebook that serves — not stopped, its job running, its JupyterLab's endpoint known —
has a route of kind notebook under its id, with its token (added by the proxy to every
request, never shown to the browser). ``NotebookRoutes`` publishes them: all of them on each
pass of the notebooks' routes pipeline (``gpupool.loops.notebook_routes``: woken whenever an
attempt starts or ends), and one at once when a user stops or resumes it, so that a stopped
notebook is out of reach before the stop returns. ``admit`` is the table's rule: its owner
alone, while in its team (admins included, everyone else is told it does not exist).
``not_served`` says, from the records, why a notebook has no route.
"""

from __future__ import annotations

from typing import NoReturn

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.notebooks import NotebookState
from gpupool.errors import NotebookNotRunning, NotFound
from gpupool.executors.base import Executor
from gpupool.proxy import KeyHolder, Kind, Route, Routes, Upstream, Who
from gpupool.services.core import Principal, Writes
from gpupool.services.jobs import endpoints_of
from gpupool.services.notebooks._notebooks import _job, _not_serving, not_yours, owned, view
from gpupool.store.db import Database
from gpupool.store.models import JobModel, NotebookModel


class NotebookRoutes:
    """Publishes the notebooks' routes into the proxy's table (see the module's docstring)."""

    def __init__(self, db: Database, executor: Executor, routes: Routes) -> None:
        self.db, self.executor, self.routes = db, executor, routes

    def publish(self) -> None:
        """Publish the route of every notebook that serves now (replacing all)."""
        with self.db.reader() as session:
            found = load_routes(session, self.executor)
        self.routes.publish(Kind.NOTEBOOK, found)

    def changed(self, notebook_id: int) -> None:
        """Publish notebook ``notebook_id``'s route now, or withdraw it (stopped)."""
        with self.db.reader() as session:
            found = load_routes(session, self.executor, notebook_id)
        self.routes.publish_key(Kind.NOTEBOOK, str(notebook_id), found)


def load_routes(
    session: Session, executor: Executor, notebook_id: int | None = None
) -> list[Route]:
    """The routes of the notebooks that serve (of ``notebook_id`` only, when given)."""
    query = (
        select(NotebookModel.id, NotebookModel.team_id, NotebookModel.user_id)
        .add_columns(NotebookModel.token, NotebookModel.job_id)
        .join(JobModel, JobModel.id == NotebookModel.job_id)
        .where(
            NotebookModel.stopped_at.is_(None),
            NotebookModel.token.is_not(None),
            JobModel.status == "running",
        )
    )
    if notebook_id is not None:
        query = query.where(NotebookModel.id == notebook_id)
    rows = session.execute(query).all()
    endpoints = endpoints_of(session, executor, [row.job_id for row in rows])
    return [
        Route(
            Kind.NOTEBOOK,
            str(nid),
            nid,
            team_id,
            owner_id=user_id,
            upstreams=(Upstream(nid, endpoints[job_id], {"Authorization": f"token {token}"}),),
            secret=token,
        )
        for nid, team_id, user_id, token, job_id in rows
        if job_id in endpoints
    ]


def admit(routes: tuple[Route, ...], key: str, caller: Who | KeyHolder) -> Route:
    """The proxy table's rule for notebooks: its owner alone, while in its team; anyone
    else (admins included: opening a notebook runs code as its owner) NotFound."""
    route = routes[0]
    if (
        isinstance(caller, KeyHolder)
        or caller.user_id != route.owner_id
        or not caller.can_see_team(route.team_id)
    ):
        raise NotFound(not_yours(route.id))
    return route


def not_served(ctx: Writes, who: Principal, notebook_id: int) -> NoReturn:
    """Why notebook ``notebook_id`` has no route, from its records: NotFound for anyone but
    its owner; else NotebookNotRunning with its state (a notebook whose job has just started
    is still ``starting`` until its route is published)."""
    with ctx.db.reader() as session:
        notebook = owned(session, who, notebook_id)
        shown = view(notebook, _job(session, notebook), ctx.clock.now())
    state = shown.state
    if state == NotebookState.RUNNING:
        state = NotebookState.STARTING
        message = f"notebook {notebook_id} is starting: JupyterLab does not answer yet"
    else:
        message = _not_serving(shown)
    raise NotebookNotRunning(message, state=state.value)
