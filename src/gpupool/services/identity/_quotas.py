"""Team quotas: a guarantee by GPU model, a limit, a weight and a storage quota (bytes its
files may take, see ``services.scheduling``); and what each team holds.

A guarantee names GPU models the way jobs name GPU types: a key matches every GPU whose model
contains it, ignoring case ("A100" matches "NVIDIA A100-SXM4-80GB"); ``"*"`` is any model.
The pool must be able to honour every guarantee at once, so a change that would make the
teams' guarantees add up to more GPUs than the pool has (of one model, or in all) is refused.
An empty pool accepts anything: its nodes have not joined yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import gpupool.services.identity._users as users
from gpupool.domain.jobs import JobStatus
from gpupool.domain.units import format_bytes
from gpupool.errors import (
    GuaranteesExceedPool,
    InvalidRequest,
    LimitBelowGuarantee,
    StorageQuotaExceeded,
)
from gpupool.scheduler.types import ANY_MODEL, NodeCapacity, TeamQuota, names
from gpupool.services import cluster as cluster_service
from gpupool.store.models import JobModel, QuotaChangeModel, TeamModel

EPSILON = 1e-9


@dataclass(frozen=True)
class Quota:
    """What an admin sets for a team. Zero entries of ``guarantee`` are dropped.
    ``storage``: the most bytes the team's files may take (None: no storage quota)."""

    guarantee: Mapping[str, float] = field(default_factory=dict)
    limit: float | None = None
    weight: float = 1.0
    storage: int | None = None

    @property
    def guaranteed(self) -> float:
        return sum(self.guarantee.values())


@dataclass(frozen=True)
class Usage:
    """What a team holds now (GPUs, in all and by model) and how many of its jobs wait."""

    gpus: float = 0.0
    by_model: dict[str, float] = field(default_factory=dict)
    pending: int = 0


def create_team(
    session: Session, name: str, quota: Quota, nodes: Sequence[NodeCapacity], now: float
) -> TeamModel:
    """A new team with its quota, refused as a whole if the quota is."""
    quota = normalized(quota)
    check(session, name, quota, nodes)
    team = users.create_team(session, name, now)
    _store(session, team, quota, now)
    return team


def set_quota(
    session: Session,
    name: str,
    quota: Quota,
    nodes: Sequence[NodeCapacity],
    now: float,
    keep_storage: bool = False,
) -> TeamModel:
    """Replace a team's quota (every field: what is left out takes its default), but for its
    storage quota where ``keep_storage``: a change of its GPUs never drops that by omission."""
    team = users.get_team(session, name)
    if keep_storage:
        quota = replace(quota, storage=team.storage_quota)
    quota = normalized(quota)
    check(session, name, quota, nodes)
    _store(session, team, quota, now)
    session.flush()
    return team


def quota_of(team: TeamModel) -> Quota:
    return Quota(dict(team.guarantee or {}), team.gpu_limit, team.weight, team.storage_quota)


def team_quotas(session: Session) -> tuple[TeamQuota, ...]:
    """Every team's quota as the scheduler reads it."""
    rows = session.execute(
        select(TeamModel.name, TeamModel.guarantee, TeamModel.gpu_limit, TeamModel.weight).where(
            users.not_deleted()
        )
    )
    return tuple(
        TeamQuota(name, dict(guarantee or {}), limit, weight)
        for name, guarantee, limit, weight in rows
    )


def normalized(quota: Quota) -> Quota:
    """Keys stripped, zero entries dropped; a model named twice (ignoring case) is refused."""
    guarantee: dict[str, float] = {}
    seen: set[str] = set()
    for raw, gpus in quota.guarantee.items():
        key = raw.strip()
        if key.lower() in seen:
            raise InvalidRequest(f"the guarantee names '{key}' twice: name each GPU model once")
        seen.add(key.lower())
        if gpus > 0:
            guarantee[key] = gpus
    return Quota(guarantee, quota.limit, quota.weight, quota.storage)


def check(session: Session, name: str, quota: Quota, nodes: Sequence[NodeCapacity]) -> None:
    """Refuse a limit below the guarantee, and guarantees the pool could not honour."""
    if quota.limit is not None and quota.limit + EPSILON < quota.guaranteed:
        raise LimitBelowGuarantee(
            f"the limit ({quota.limit:g} GPUs) is below the team's guarantee "
            f"({quota.guaranteed:g} GPUs): raise the limit or lower the guarantee",
            limit=quota.limit,
            guarantee=quota.guaranteed,
        )
    models = [gpu.model for node in nodes for gpu in node.gpus]
    if not models:
        return
    others = {
        team.name: dict(team.guarantee or {})
        for team in users.list_teams(session)
        if team.name != name
    }
    everyone = others | {name: dict(quota.guarantee)}
    for key in quota.guarantee:
        _check_model(key, everyone, models)
    _check_total(everyone, len(models))


def usage(
    session: Session, nodes: Sequence[NodeCapacity], team_ids: Iterable[int]
) -> dict[int, Usage]:
    """Team id -> what it holds now and its pending job count."""
    model_of = {gpu.uuid: gpu.model for node in nodes for gpu in node.gpus}
    held: dict[int, dict[str, float]] = {team_id: {} for team_id in team_ids}
    rows = session.execute(
        select(JobModel.team_id, JobModel.placement).where(
            JobModel.status.in_(cluster_service.ACTIVE), JobModel.team_id.in_(list(held))
        )
    )
    for team_id, placement in rows:
        tasks = (placement or {}).get("tasks") or [placement or {}]
        for gpu in (g for task in tasks for g in task.get("gpus", [])):
            model = model_of.get(gpu["uuid"], "unknown")
            held[team_id][model] = held[team_id].get(model, 0.0) + gpu["share"]
    pending = dict(
        session.execute(
            select(JobModel.team_id, func.count())
            .where(JobModel.status == JobStatus.PENDING.value, JobModel.team_id.in_(list(held)))
            .group_by(JobModel.team_id)
        ).all()
    )
    return {
        team_id: Usage(round(sum(by.values()), 6), by, pending.get(team_id, 0))
        for team_id, by in held.items()
    }


def refuse_over_storage(team: TeamModel) -> None:
    """StorageQuotaExceeded while the team's files, as last scanned, are over its quota."""
    if team.storage_quota is None or team.storage_used is None:
        return
    if team.storage_used > team.storage_quota:
        raise StorageQuotaExceeded(
            f"team {team.name}'s files take {format_bytes(team.storage_used)}, over its "
            f"storage quota of {format_bytes(team.storage_quota)}: delete outputs or model "
            "versions it no longer needs, or ask an admin for a larger quota "
            "(gpupool team set-quota --storage)",
            team=team.name,
            used=team.storage_used,
            quota=team.storage_quota,
        )


def refuse_for_member(session: Session, team_ids: Iterable[int]) -> None:
    """StorageQuotaExceeded while any of these teams (an uploader's) is over its quota: an
    upload counts for each team of its uploader."""
    ids = list(team_ids)
    query = select(TeamModel).where(TeamModel.id.in_(ids), users.not_deleted())
    for team in session.scalars(query):
        refuse_over_storage(team)


def matches(key: str, model: str) -> bool:
    """A guarantee's key matches a GPU model it names, ignoring case, as a job's GPU type
    does (``names``: ``A100`` an ``NVIDIA A100-SXM4-80GB``, not ``A10`` an A100); "*" all."""
    return key == ANY_MODEL or names(key.lower(), model.lower())


def _check_model(key: str, everyone: dict[str, dict[str, float]], models: list[str]) -> None:
    if key == ANY_MODEL:
        return
    shares = {team: g[k] for team, g in everyone.items() for k in g if k.lower() == key.lower()}
    available = sum(1 for model in models if matches(key, model))
    _refuse_above(f"of {key} ", shares, available, f"{available} {key} GPUs", key)


def _check_total(everyone: dict[str, dict[str, float]], total: int) -> None:
    shares = {team: sum(g.values()) for team, g in everyone.items() if g}
    _refuse_above("", shares, total, f"{total} GPUs in all", ANY_MODEL)


def _refuse_above(
    what: str, shares: dict[str, float], available: float, has: str, model: str
) -> None:
    guaranteed = sum(shares.values())
    if guaranteed <= available + EPSILON:
        return
    parts = ", ".join(f"{team} {gpus:g}" for team, gpus in sorted(shares.items()) if gpus)
    raise GuaranteesExceedPool(
        f"the teams' guarantees {what}would add up to {guaranteed:g} GPUs ({parts}) but the "
        f"pool has {has}: lower a guarantee, or add GPUs first",
        model=model,
        guaranteed=guaranteed,
        available=available,
    )


def _store(session: Session, team: TeamModel, quota: Quota, now: float) -> None:
    """Set the team's quota and record it, so the teams' history knows it from ``now`` on."""
    team.guarantee = dict(quota.guarantee)
    team.gpu_limit = quota.limit
    team.weight = quota.weight
    team.storage_quota = quota.storage
    session.add(
        QuotaChangeModel(
            team_id=team.id,
            at=now,
            guarantee=dict(quota.guarantee),
            gpu_limit=quota.limit,
            weight=quota.weight,
        )
    )
