"""Teams, users and API tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from gpupool.api.deps import Id, Platform, PlatformDep, PrincipalDep, client_address
from gpupool.api.schemas import (
    PasswordChange,
    QuotaIn,
    TeamCreate,
    TeamDeleted,
    TeamHistoryOut,
    TeamOut,
    TeamSeriesOut,
    TeamUsageOut,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UserCreate,
    UserOut,
    UserUpdate,
    WhoAmI,
)
from gpupool.errors import NotFound, WrongPassword
from gpupool.services import auth, history, quotas, users
from gpupool.store.models import TeamModel, TokenModel, UserModel

router = APIRouter(tags=["admin"])
DAY = 86400.0


@router.get("/teams", response_model=list[TeamOut])
def list_teams(ctx: PlatformDep, who: PrincipalDep) -> list[TeamOut]:
    """Each team you can see, with its quota, the GPUs it holds and its pending job count."""
    nodes = ctx.loop.snapshots.nodes.recent(ctx.db)
    with ctx.db.reader() as session:
        visible = [t for t in users.list_teams(session) if who.can_see_team(t.id)]
        used = quotas.usage(session, nodes, [t.id for t in visible])
        return [team_out(t, used[t.id]) for t in visible]


@router.get("/teams/history", response_model=TeamHistoryOut)
def team_history(
    ctx: PlatformDep,
    who: PrincipalDep,
    hours: Annotated[float, Query(gt=0, le=24 * 90)] = 24.0,
    buckets: Annotated[int, Query(ge=1, le=history.MAX_BUCKETS)] = 48,
) -> TeamHistoryOut:
    """Each team you can see: GPUs held, GPUs wanted and its fair share, over the last hours."""
    nodes = ctx.loop.snapshots.nodes.recent(ctx.db)
    pool = float(sum(len(node.gpus) for node in nodes if node.schedulable))
    window = history.Window(ctx.clock.now(), hours, buckets)
    with ctx.db.reader() as session:
        visible = {t.name for t in users.list_teams(session) if who.can_see_team(t.id)}
        found = history.team_history(session, quotas.team_quotas(session), pool, window)
    return TeamHistoryOut(
        start=window.start,
        end=window.end,
        bucket_seconds=window.width,
        pool_gpus=found.pool_gpus,
        times=window.starts(),
        teams=[
            TeamSeriesOut(**series.__dict__) for series in found.teams if series.team in visible
        ],
    )


@router.post("/teams", status_code=status.HTTP_201_CREATED, response_model=TeamOut)
def create_team(body: TeamCreate, ctx: PlatformDep, who: PrincipalDep) -> TeamOut:
    who.require_admin()
    nodes = ctx.loop.snapshots.nodes.recent(ctx.db)
    with ctx.db.session() as session:
        team = quotas.create_team(session, body.name, quota_in(body), nodes, ctx.clock.now())
        out = team_out(team, quotas.Usage())
    _quotas_changed(ctx)
    return out


@router.put("/teams/{name}/quota", response_model=TeamOut)
def set_quota(name: str, body: QuotaIn, ctx: PlatformDep, who: PrincipalDep) -> TeamOut:
    """Replace a team's quota: what the body leaves out takes its default."""
    who.require_admin()
    nodes = ctx.loop.snapshots.nodes.recent(ctx.db)
    with ctx.db.session() as session:
        team = quotas.set_quota(session, name, quota_in(body), nodes, ctx.clock.now())
        out = team_out(team, quotas.usage(session, nodes, [team.id])[team.id])
    _quotas_changed(ctx)
    return out


@router.delete("/teams/{name}", response_model=TeamDeleted)
def delete_team(name: str, ctx: PlatformDep, who: PrincipalDep) -> TeamDeleted:
    """Delete a team without pending or running jobs (else 409 team_not_empty); its members
    leave it, its finished jobs keep their records. The default team stays."""
    who.require_admin()
    with ctx.db.session() as session:
        deleted = users.delete_team(session, name)
    ctx.tokens.clear()  # its members' teams changed
    _quotas_changed(ctx)
    return TeamDeleted(name=deleted.name, finished_jobs=deleted.finished_jobs)


@router.put("/teams/{name}/members/{user}", response_model=UserOut)
def add_member(name: str, user: str, ctx: PlatformDep, who: PrincipalDep) -> UserOut:
    """Make a user a member of the team: it sees and submits the team's jobs."""
    who.require_admin()
    with ctx.db.session() as session:
        out = user_out(users.join_team(session, name, user))
    ctx.tokens.clear()
    return out


@router.delete("/teams/{name}/members/{user}", response_model=UserOut)
def remove_member(name: str, user: str, ctx: PlatformDep, who: PrincipalDep) -> UserOut:
    """End a user's membership of the team; its jobs there stay in the team."""
    who.require_admin()
    with ctx.db.session() as session:
        out = user_out(users.leave_team(session, name, user))
    ctx.tokens.clear()
    return out


@router.post("/whoami/password", response_model=WhoAmI)
def change_password(
    body: PasswordChange, request: Request, ctx: PlatformDep, who: PrincipalDep
) -> WhoAmI:
    """Change your own password: give the current one (unless you have none). Wrong ones
    are throttled as failed sign-ins are; web sessions opened with the old one end."""
    address = client_address(request)
    ctx.throttle.check(address, who.name)
    try:
        with ctx.db.session() as session:
            user = users.change_own_password(session, who.user_id, body.current, body.new)
            return WhoAmI(user=user.name, role=user.role, teams=sorted(t.name for t in user.teams))
    except WrongPassword:
        ctx.throttle.failed(address, who.name)
        raise


@router.get("/users", response_model=list[UserOut])
def list_users(ctx: PlatformDep, who: PrincipalDep) -> list[UserOut]:
    who.require_admin()
    with ctx.db.reader() as session:
        return [user_out(u) for u in users.list_users(session)]


@router.post("/users", status_code=status.HTTP_201_CREATED, response_model=UserOut)
def create_user(body: UserCreate, ctx: PlatformDep, who: PrincipalDep) -> UserOut:
    who.require_admin()
    with ctx.db.session() as session:
        user = users.create_user(
            session,
            body.name,
            body.role,
            body.teams,
            ctx.clock.now(),
            password=body.password,
            weight=body.weight,
            unix_user=body.unix_user,
        )
        out = user_out(user)
    _weights_changed(ctx)
    return out


@router.patch("/users/{name}", response_model=UserOut)
def update_user(name: str, body: UserUpdate, ctx: PlatformDep, who: PrincipalDep) -> UserOut:
    who.require_admin()
    with ctx.db.session() as session:
        user = users.update_user(session, name, **body.model_dump(exclude_unset=True))
        out = user_out(user)
    ctx.tokens.clear()
    if body.weight is not None:
        _weights_changed(ctx)
    return out


@router.get("/tokens", response_model=list[TokenOut])
def list_tokens(ctx: PlatformDep, who: PrincipalDep) -> list[TokenOut]:
    with ctx.db.reader() as session:
        found = auth.list_tokens(session, None if who.is_admin else who.user_id)
        return [token_out(t, session.get(UserModel, t.user_id).name) for t in found]


@router.post("/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
def create_token(body: TokenCreate, ctx: PlatformDep, who: PrincipalDep) -> TokenCreated:
    now = ctx.clock.now()
    with ctx.db.session() as session:
        if body.user and body.user != who.name:
            who.require_admin()
            owner = users.get_user(session, body.user)
        else:
            owner = session.get(UserModel, who.user_id)
        expires = now + body.expires_in_days * DAY if body.expires_in_days else None
        secret, token = auth.create_token(session, owner, body.name, now, expires)
        return TokenCreated(token=secret, **token_out(token, owner.name).model_dump())


@router.delete("/tokens/{token_id}", response_model=TokenOut)
def revoke_token(token_id: Id, ctx: PlatformDep, who: PrincipalDep) -> TokenOut:
    with ctx.db.session() as session:
        token = auth.revoke_token(session, token_id, who, ctx.clock.now())
        owner = session.get(UserModel, token.user_id)
        if owner is None:
            raise NotFound(f"no token {token_id}")
        out = token_out(token, owner.name)
    ctx.tokens.clear()
    return out


def quota_in(body: QuotaIn) -> quotas.Quota:
    return quotas.Quota(dict(body.guarantee), body.limit, body.weight)


def team_out(team: TeamModel, used: quotas.Usage) -> TeamOut:
    quota = quotas.quota_of(team)
    return TeamOut(
        id=team.id,
        name=team.name,
        guarantee=dict(quota.guarantee),
        limit=quota.limit,
        weight=quota.weight,
        usage=TeamUsageOut(gpus=used.gpus, by_model=used.by_model),
        pending=used.pending,
    )


def _quotas_changed(ctx: Platform) -> None:
    ctx.loop.snapshots.quotas_changed()
    ctx.loop.wake()


def _weights_changed(ctx: Platform) -> None:
    ctx.loop.snapshots.weights_changed()
    ctx.loop.wake()


def user_out(user: UserModel) -> UserOut:
    return UserOut(
        id=user.id,
        name=user.name,
        role=user.role,
        teams=sorted(t.name for t in user.teams),
        disabled=user.disabled,
        has_password=user.password_hash is not None,
        weight=user.weight,
        unix_user=user.unix_user,
    )


def token_out(token: TokenModel, owner: str) -> TokenOut:
    return TokenOut(
        id=token.id,
        user=owner,
        name=token.name,
        prefix=token.prefix,
        created_at=token.created_at,
        last_used_at=token.last_used_at,
        expires_at=token.expires_at,
        revoked=token.revoked_at is not None,
    )
