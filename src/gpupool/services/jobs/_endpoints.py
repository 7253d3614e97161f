"""Where the running jobs that listen (``JobSpec.listen``) serve: the proxy's upstreams.

Its executor says where an attempt listens (``Executor.endpoint``), from the handle it kept
in the attempt's record (so a restarted server finds it again); nothing here reads the
executor's state. A job that is not running, or that does not listen, has no endpoint.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.endpoints import Endpoint
from gpupool.domain.jobs import JobStatus
from gpupool.executors.base import Executor
from gpupool.store.models import AttemptModel, JobModel


def endpoint_of(session: Session, executor: Executor, job_id: int) -> Endpoint | None:
    """Where the running attempt of ``job_id`` listens; None when it is not running or has
    no port. No access check: the caller has decided that its principal may reach it."""
    return endpoints_of(session, executor, [job_id]).get(job_id)


def endpoints_of(session: Session, executor: Executor, job_ids: list[int]) -> dict[int, Endpoint]:
    """``endpoint_of`` for many jobs at once: only those that have one are in the answer."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(AttemptModel.job_id, AttemptModel.executor_state)
        .join(JobModel, JobModel.id == AttemptModel.job_id)
        .where(
            AttemptModel.job_id.in_(job_ids),
            AttemptModel.number == JobModel.attempts,
            AttemptModel.status == "running",
            AttemptModel.executor_state.is_not(None),
            JobModel.status == JobStatus.RUNNING.value,
        )
    ).all()
    found = {}
    for job_id, state in rows:
        try:
            endpoint = executor.endpoint(executor.load_state(state))
        except (KeyError, TypeError, ValueError):  # a record no executor of this server made
            continue
        if endpoint is not None:
            found[job_id] = endpoint
    return found
