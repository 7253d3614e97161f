"""Deployments: make, list, show, scale, update and stop them (what the API calls).

A deployment is a desired state; these functions only change it, in one short transaction
each, and tell the deployments' loop (``_rollouts``), which starts, health-checks,
replaces and retires the replicas. Visibility follows the team: a team's deployments are
seen by its members (viewers too) and by admins, changed by its members and admins; anyone
else is answered as if the deployment did not exist. A name is unique in its team, not in
the pool: where several teams a caller sees have a deployment of one name, the caller says
which team's (``team``), else AmbiguousDeployment; nobody learns of another team's.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.deployments import (
    DeploymentDetailView,
    DeploymentEventView,
    DeploymentReason,
    DeploymentSpec,
    DeploymentView,
    ReplicaState,
    ReplicaTemplate,
    ReplicaView,
    serve_url,
)
from gpupool.domain.jobs import JobSpec
from gpupool.domain.waiting import PendingReason
from gpupool.errors import (
    AmbiguousDeployment,
    DeploymentExists,
    DeploymentStopped,
    InvalidRequest,
    NotFound,
)
from gpupool.services import jobs as job_service
from gpupool.services import models
from gpupool.services.core import Principal, Reads
from gpupool.services.deployments._ports import DeploymentContext
from gpupool.services.deployments._replicas import replica_spec
from gpupool.store.models import (
    DeploymentEventModel,
    DeploymentModel,
    DeploymentReplicaModel,
    JobModel,
    ModelVersionModel,
    RegisteredModelModel,
    TeamModel,
)

MAX_EVENTS = 50


# -- what the API calls ------------------------------------------------------------------------


def create_deployment(
    ctx: DeploymentContext, who: Principal, spec: DeploymentSpec
) -> DeploymentDetailView:
    """Record a new deployment (its replicas start soon after); refused with the submit
    path's own errors when its replicas could not run (role, team, size, model)."""
    now, nodes = ctx.clock.now(), ctx.loop.recent_nodes()
    limits = job_service.JobLimits.of(ctx.settings)
    try:
        with ctx.db.session() as session:
            row = create(session, who, spec, now, nodes, limits)
            deployment_id, name = row.id, row.name
    except IntegrityError as error:  # made at the same moment in the same team
        raise _exists(spec.name or spec.model or "") from error
    ctx.deployments.changed(name)
    return _detail(ctx, who, deployment_id)


def create(
    session: Session,
    who: Principal,
    spec: DeploymentSpec,
    now: float,
    nodes: tuple,
    limits: job_service.JobLimits,
) -> DeploymentModel:
    """The steps of ``create_deployment`` in a caller's transaction (a job file applies
    several kinds in one); the caller tells ``DeploymentSide.changed`` once it commits."""
    name = spec.name or spec.model
    if name is None:
        raise InvalidRequest(
            "a deployment needs a model (gpupool deploy NAME:VERSION) or a command and a name "
            "(gpupool deploy --name NAME -- CMD)",
            fields=[{"field": "model", "message": "missing"}],
        )
    row = _new(session, who, spec, name, now, nodes, limits)
    record(session, row.id, now, DeploymentReason.CREATED, _created_message(who, row))
    return row


def list_deployments(
    ctx: Reads, who: Principal, team: str | None = None, stopped: bool = False
) -> list[DeploymentView]:
    """The deployments ``who`` can see (of ``team`` only), live ones by name; ``stopped``:
    the stopped ones too, after them."""
    with ctx.db.reader() as session:
        query = select(DeploymentModel).order_by(
            DeploymentModel.stopped_at.is_not(None), DeploymentModel.name, DeploymentModel.id
        )
        if not who.is_admin:
            query = query.where(DeploymentModel.team_id.in_(who.team_ids or {-1}))
        if not stopped:
            query = query.where(DeploymentModel.stopped_at.is_(None))
        rows = [d for d in session.scalars(query) if team is None or d.team.name == team]
        ready = _ready_counts(session, [d.id for d in rows])
        shared = _shared_names(session, who, [d.name for d in rows])
        return [deployment_view(session, d, ready.get(d.id, 0), d.name in shared) for d in rows]


def show_deployment(
    ctx: DeploymentContext, who: Principal, name: str, team: str | None = None
) -> DeploymentDetailView:
    """The deployment ``name`` (of ``team``, where several of the caller's teams have one)
    with its replicas (why each waits, if it does), latest events and traffic."""
    with ctx.db.reader() as session:
        deployment_id = get_deployment(session, who, name, team).id
    return _detail(ctx, who, deployment_id)


def scale_deployment(
    ctx: DeploymentContext, who: Principal, name: str, replicas: int, team: str | None = None
) -> DeploymentView:
    now = ctx.clock.now()
    with ctx.db.session() as session:
        row = _changeable(session, who, name, team)
        if row.replicas != replicas:
            message = f"{who.name} scaled it from {row.replicas} to {replicas} replicas"
            row.replicas, row.updated_at = replicas, now
            record(session, row.id, now, DeploymentReason.SCALED, message)
        shown = _view_now(session, who, row)
    ctx.deployments.changed(name)
    return shown


def update_deployment(
    ctx: DeploymentContext, who: Principal, name: str, version: int | None, team: str | None = None
) -> DeploymentView:
    """Roll the deployment to ``version`` of its model (the latest when None), replica by
    replica; a version it serves already changes nothing."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        row = _changeable(session, who, name, team)
        if row.model_version_id is None:
            raise InvalidRequest(
                f"deployment {name} serves no model: there is no version to update it to; stop "
                "it and deploy again to change its command"
            )
        target = _version_row(session, who, row, version)
        if target.id != row.model_version_id:
            _start_roll(session, who, row, target, now)
        shown = _view_now(session, who, row)
    ctx.deployments.changed(name)
    return shown


def stop_deployment(
    ctx: DeploymentContext, who: Principal, name: str, team: str | None = None
) -> DeploymentView:
    """Stop serving: the deployment leaves the routing table at once, its replicas are
    stopped, and its name is free again. Stopping a stopped deployment changes nothing."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        row = get_deployment(session, who, name, team, stopped_too=True)
        who.require_member()
        if not who.can_act_on_team(row.team_id):
            raise NotFound(_unknown(name))
        if row.stopped_at is None:
            row.stopped_at = row.updated_at = now
            row.reason, row.message = DeploymentReason.STOPPED.value, f"stopped by {who.name}"
            record(session, row.id, now, DeploymentReason.STOPPED, row.message)
        shown = deployment_view(session, row, 0)
    ctx.deployments.changed(name)
    return shown


# -- the steps, in a caller's transaction ------------------------------------------------------


def get_deployment(
    session: Session,
    who: Principal,
    name: str,
    team: str | None = None,
    stopped_too: bool = False,
) -> DeploymentModel:
    """The live deployment ``name`` (of ``team``, when given; else the latest stopped one,
    with ``stopped_too``) that ``who`` can see. NotFound when there is none;
    AmbiguousDeployment when several of the teams ``who`` sees have a live one."""
    rows = _visible(session, who, name, team)
    live = [row for row in rows if row.stopped_at is None]
    if len(live) > 1:
        raise _ambiguous(name, sorted(row.team.name for row in live))
    row = live[0] if live else (rows[0] if rows else None)
    if row is None:
        raise NotFound(_unknown(name, team))
    if row.stopped_at is not None and not stopped_too:
        raise DeploymentStopped(
            f"deployment {name} was stopped: deploy it again (gpupool deploy) to serve it"
        )
    return row


def record(
    session: Session, deployment_id: int, now: float, reason: DeploymentReason, message: str
) -> None:
    session.add(
        DeploymentEventModel(
            deployment_id=deployment_id, at=now, reason=reason.value, message=message
        )
    )


def deployment_view(
    session: Session, row: DeploymentModel, ready: int, shared: bool = False
) -> DeploymentView:
    """``shared``: another team its viewer sees has a live deployment of its name, so its
    ``url`` names its team."""
    template = ReplicaTemplate.model_validate(row.template)
    model, version = _model_of(session, row.model_version_id)
    state = "stopped" if row.stopped_at else ("updating" if row.rolling_from else "running")
    return DeploymentView(
        id=row.id,
        name=row.name,
        team=row.team.name,
        user=row.user.name,
        model=model,
        version=version,
        replicas=row.replicas,
        ready=ready,
        state=state,
        url=serve_url(row.name, row.team.name if shared else None),
        team_url=serve_url(row.name, row.team.name),
        command=template.command,
        resources=template.resources,
        health_path=template.health_path,
        environment=template.environment,
        reason=row.reason,
        message=row.message,
        created_at=row.created_at,
        updated_at=row.updated_at,
        stopped_at=row.stopped_at,
    )


def version_number(session: Session, version_id: int | None) -> int | None:
    return _model_of(session, version_id)[1]


# -- helpers -----------------------------------------------------------------------------------


def _new(
    session: Session,
    who: Principal,
    spec: DeploymentSpec,
    name: str,
    now: float,
    nodes: tuple,
    limits: job_service.JobLimits,
) -> DeploymentModel:
    version = None
    if spec.model is not None:
        version = models.resolve_version(session, who, spec.model, spec.version, spec.team)
    template = spec.template()
    archive = version.archive if version else None
    probe = replica_spec(name, 0, template, version.team if version else spec.team, archive)
    team = job_service.admit(session, who, probe, nodes, limits)  # as its replicas will be
    template.environment = probe.environment  # the version every replica runs, pinned
    if _live(session, team.id, name) is not None:  # in its own team only: no other's name
        raise _exists(name, team.name)
    version_id = _version_id(session, team.id, spec.model, version.version) if version else None
    row = DeploymentModel(
        name=name,
        team_id=team.id,
        user_id=who.user_id,
        created_at=now,
        updated_at=now,
        replicas=spec.replicas,
        template=template.model_dump(mode="json"),
        model_version_id=version_id,
        generation=1,
        last_generation=1,
        reason=DeploymentReason.CREATED.value,
        message="starting its replicas",
    )
    session.add(row)
    session.flush()
    return row


def _detail(ctx: DeploymentContext, who: Principal, deployment_id: int) -> DeploymentDetailView:
    traffic = ctx.deployments.traffic
    with ctx.db.reader() as session:
        row = session.get(DeploymentModel, deployment_id)
        replicas = _replicas(session, row)
        ready = sum(1 for r in replicas if r.state == ReplicaState.READY)
        shown = deployment_view(session, row, ready, bool(_shared_names(session, who, [row.name])))
        waiting = ctx.loop.pending_reasons
        replica_views = [
            r.model_copy(update={"traffic": traffic.of_replica(r.id)} | _waiting(r, waiting))
            for r in replicas
        ]
        return DeploymentDetailView(
            **dict(shown),
            rolling_from_version=version_number(session, row.rolling_from_version_id),
            replica_list=replica_views,
            events=_events(session, row.id),
            traffic=traffic.of_deployment(row.id),
        )


def _replicas(session: Session, row: DeploymentModel) -> list[ReplicaView]:
    """Its live replicas, and those retired in the last passes that are still stopping."""
    query = (
        select(DeploymentReplicaModel, JobModel.node)
        .outerjoin(JobModel, JobModel.id == DeploymentReplicaModel.job_id)
        .where(
            DeploymentReplicaModel.deployment_id == row.id,
            DeploymentReplicaModel.state != ReplicaState.STOPPED.value,
        )
        .order_by(DeploymentReplicaModel.id)
    )
    found = []
    for replica, node in session.execute(query):
        found.append(
            ReplicaView(
                id=replica.id,
                generation=replica.generation,
                version=version_number(session, replica.model_version_id),
                job_id=replica.job_id,
                node=node,
                state=ReplicaState(replica.state),
                restarts=replica.restarts,
                failures=replica.failures,
                created_at=replica.created_at,
                ready_at=replica.ready_at,
                message=replica.message,
            )
        )
    return found


def _events(session: Session, deployment_id: int) -> list[DeploymentEventView]:
    query = (
        select(DeploymentEventModel)
        .where(DeploymentEventModel.deployment_id == deployment_id)
        .order_by(DeploymentEventModel.id.desc())
        .limit(MAX_EVENTS)
    )
    rows = reversed(list(session.scalars(query)))
    return [DeploymentEventView(id=e.id, at=e.at, reason=e.reason, message=e.message) for e in rows]


def _ready_counts(session: Session, ids: list[int]) -> dict[int, int]:
    if not ids:
        return {}
    query = (
        select(DeploymentReplicaModel.deployment_id, func.count())
        .where(
            DeploymentReplicaModel.deployment_id.in_(ids),
            DeploymentReplicaModel.state == ReplicaState.READY.value,
        )
        .group_by(DeploymentReplicaModel.deployment_id)
    )
    return dict(session.execute(query).all())


def _model_of(session: Session, version_id: int | None) -> tuple[str | None, int | None]:
    if version_id is None:
        return None, None
    row = session.execute(
        select(RegisteredModelModel.name, ModelVersionModel.number)
        .join(RegisteredModelModel, RegisteredModelModel.id == ModelVersionModel.model_id)
        .where(ModelVersionModel.id == version_id)
    ).first()
    return (row[0], row[1]) if row else (None, None)


def _version_id(session: Session, team_id: int, name: str, number: int) -> int:
    return session.scalars(
        select(ModelVersionModel.id)
        .join(RegisteredModelModel, RegisteredModelModel.id == ModelVersionModel.model_id)
        .where(
            RegisteredModelModel.team_id == team_id,
            RegisteredModelModel.name == name,
            ModelVersionModel.number == number,
        )
    ).one()


def _version_row(
    session: Session, who: Principal, row: DeploymentModel, version: int | None
) -> ModelVersionModel:
    model, _ = _model_of(session, row.model_version_id)
    found = models.resolve_version(session, who, model or "", version, row.team.name)
    return session.get(ModelVersionModel, _version_id(session, row.team_id, model, found.version))


def _start_roll(
    session: Session,
    who: Principal,
    row: DeploymentModel,
    target: ModelVersionModel,
    now: float,
) -> None:
    """A new generation serves ``target``; the loop replaces the replicas one by one. An
    update during a roll rolls on from the generation that serves now (the roll's source)."""
    source_version = _model_of(session, row.model_version_id)[1]
    if row.rolling_from is None:
        row.rolling_from, row.rolling_from_version_id = row.generation, row.model_version_id
    row.last_generation += 1
    row.generation, row.model_version_id, row.updated_at = row.last_generation, target.id, now
    message = f"{who.name} updated it from version {source_version} to {target.number}"
    row.reason, row.message = DeploymentReason.UPDATE_STARTED.value, message
    record(session, row.id, now, DeploymentReason.UPDATE_STARTED, message)


def _changeable(
    session: Session, who: Principal, name: str, team: str | None = None
) -> DeploymentModel:
    row = get_deployment(session, who, name, team)
    who.require_member()
    if not who.can_act_on_team(row.team_id):
        raise NotFound(_unknown(name))
    return row


def _view_now(session: Session, who: Principal, row: DeploymentModel) -> DeploymentView:
    ready = _ready_counts(session, [row.id]).get(row.id, 0)
    return deployment_view(session, row, ready, bool(_shared_names(session, who, [row.name])))


def _visible(
    session: Session, who: Principal, name: str, team: str | None
) -> list[DeploymentModel]:
    """The deployments ``name`` of the teams ``who`` sees (of ``team`` only, when given):
    live ones first, then the latest stopped."""
    query = (
        select(DeploymentModel)
        .where(DeploymentModel.name == name)
        .order_by(DeploymentModel.stopped_at.is_not(None), DeploymentModel.id.desc())
    )
    if not who.is_admin:
        query = query.where(DeploymentModel.team_id.in_(who.team_ids or {-1}))
    if team is not None:
        query = query.join(TeamModel, TeamModel.id == DeploymentModel.team_id).where(
            TeamModel.name == team
        )
    return list(session.scalars(query))


def _shared_names(session: Session, who: Principal, names: list[str]) -> set[str]:
    """Those of ``names`` that live deployments of several teams ``who`` sees have."""
    if not names:
        return set()
    query = (
        select(DeploymentModel.name)
        .where(DeploymentModel.name.in_(set(names)), DeploymentModel.stopped_at.is_(None))
        .group_by(DeploymentModel.name)
        .having(func.count() > 1)
    )
    if not who.is_admin:
        query = query.where(DeploymentModel.team_id.in_(who.team_ids or {-1}))
    return set(session.scalars(query))


def _waiting(replica: ReplicaView, reasons: Mapping[int, PendingReason]) -> dict[str, str]:
    """Why a pending replica's job waits, as the scheduler said last (``gpupool why``)."""
    found = reasons.get(replica.job_id) if replica.job_id is not None else None
    if replica.state != ReplicaState.PENDING or found is None:
        return {}
    return {"waiting_reason": found.code.value, "waiting_message": found.message}


def _live(session: Session, team_id: int, name: str) -> int | None:
    return session.scalar(
        select(DeploymentModel.id).where(
            DeploymentModel.team_id == team_id,
            DeploymentModel.name == name,
            DeploymentModel.stopped_at.is_(None),
        )
    )


def _created_message(who: Principal, row: DeploymentModel) -> str:
    return f"deployed by {who.name} with {row.replicas} replica(s)"


def _exists(name: str, team: str) -> DeploymentExists:
    return DeploymentExists(
        f"a deployment named {name} runs already in team {team}: a name is unique in its "
        f"team (it is the address /serve/{name}/); choose another with --name, or update "
        f"that one (gpupool deploy update {name} --team {team})",
        team=team,
    )


def _ambiguous(name: str, teams: list[str]) -> AmbiguousDeployment:
    addresses = ", ".join(serve_url(name, team) for team in teams)
    return AmbiguousDeployment(
        f"teams {', '.join(teams)} each have a deployment {name}: say which with --team "
        f"(?team= in the API), or call it at {addresses}",
        teams=teams,
        addresses=[serve_url(name, team) for team in teams],
    )


def _unknown(name: str, team: str | None = None) -> str:
    where = f" of team {team}" if team else ""
    return f"no deployment {name}{where}: list yours with 'gpupool deploy ls'"


def job_spec_of(row: DeploymentModel, archive: str | None, index: int) -> JobSpec:
    """The spec of a replica job of ``row`` (slot ``index``) serving ``archive``."""
    template = ReplicaTemplate.model_validate(row.template)
    return replica_spec(row.name, index, template, row.team.name, archive)
