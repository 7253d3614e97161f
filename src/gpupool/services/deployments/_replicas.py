"""A deployment's replica as a job: its spec, its submit and its stop.

Each replica runs as a job of kind ``replica`` submitted through the same path as every
job (role, team, quota, size and model checks; the scheduler; the sandbox; Ray), as the
user who made the deployment: non-preemptible (it serves), listening on the port its
executor gives it, and shown its model version's files read-only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from sqlalchemy.orm import Session

from gpupool.domain.deployments import ReplicaTemplate
from gpupool.domain.jobs import JobKind, JobSpec, Role
from gpupool.scheduler.types import NodeCapacity
from gpupool.services import jobs as job_service
from gpupool.services.core import Principal
from gpupool.store.models import DeploymentModel, JobModel, UserModel

# the built-in server, run by the Python that runs gpupool (the sandbox shows it)
BUILT_IN_SERVER = ("-m", "gpupool.serving")


def replica_spec(
    name: str, index: int, template: ReplicaTemplate, team: str | None, archive: str | None
) -> JobSpec:
    """The job of replica ``index`` of deployment ``name``."""
    command = template.command or [os.path.normpath(sys.executable), *BUILT_IN_SERVER]
    return JobSpec(
        name=f"{name}/{index}",
        command=command,
        env=template.env,
        resources=template.resources,
        gpu_types=template.gpu_types,
        team=team,
        preemptible=False,
        listen=True,
        model=archive,
        environment=template.environment,
    )


def submit_replica(
    session: Session,
    deployment: DeploymentModel,
    spec: JobSpec,
    nodes: Sequence[NodeCapacity],
    now: float,
    limits: job_service.JobLimits,
) -> JobModel:
    """Queue the replica's job as the deployment's user (GpupoolError when refused: that
    user lost the right, or the pool can no longer run it)."""
    owner = owner_of(session, deployment)
    return job_service.submit(session, owner, spec, nodes, now, limits, kind=JobKind.REPLICA)


def stop_replica_job(
    session: Session, deployment: DeploymentModel, job_id: int, now: float
) -> None:
    """Cancel the replica's job (the control loop stops it), on the deployment's behalf."""
    acting = Principal(
        user_id=deployment.user_id,
        name=f"deployment {deployment.name}",
        role=Role.ADMIN,  # the platform acting on its own workload
        team_ids=frozenset({deployment.team_id}),
    )
    job_service.cancel(session, acting, job_id, now)


def owner_of(session: Session, deployment: DeploymentModel) -> Principal:
    """The deployment's user as a principal, as of now (a disabled one submits nothing)."""
    user = session.get(UserModel, deployment.user_id)
    if user is None or user.disabled:
        return Principal(deployment.user_id, "?", Role.VIEWER, frozenset())
    return Principal(
        user_id=user.id,
        name=user.name,
        role=Role(user.role),
        team_ids=frozenset(team.id for team in user.teams),
        admin_team_ids=frozenset(team.id for team in user.admin_of),
    )
