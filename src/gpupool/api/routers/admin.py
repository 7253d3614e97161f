"""Teams, users and API tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from gpupool.api.access import Rule, allow
from gpupool.api.deps import Id, PlatformDep, client_address
from gpupool.api.schemas import (
    MemberIn,
    PasswordChange,
    QuotaIn,
    TeamCreate,
    TokenCreate,
    UserCreate,
    UserUpdate,
)
from gpupool.domain.views import (
    TeamDeletedView,
    TeamHistoryView,
    TeamView,
    TokenCreatedView,
    TokenView,
    UserView,
    WhoAmIView,
)
from gpupool.services import identity
from gpupool.services.core import Principal

router = APIRouter(tags=["admin"])
SignedIn = Annotated[Principal, allow(Rule.SIGNED_IN)]
Admin = Annotated[Principal, allow(Rule.ADMIN)]
TeamAdmin = Annotated[Principal, allow(Rule.TEAM_ADMIN)]


@router.get("/teams", response_model=list[TeamView])
def list_teams(ctx: PlatformDep, who: SignedIn) -> list[TeamView]:
    """Each team you can see, with its quota, the GPUs it holds and its pending job count."""
    return identity.list_teams(ctx, who)


@router.get("/teams/history", response_model=TeamHistoryView)
def team_history(
    ctx: PlatformDep,
    who: SignedIn,
    hours: Annotated[float, Query(gt=0, le=24 * 90)] = 24.0,
    buckets: Annotated[int, Query(ge=1, le=identity.MAX_BUCKETS)] = 48,
) -> TeamHistoryView:
    """Each team you can see: GPUs held, GPUs wanted and its fair share, over the last hours."""
    return identity.team_history(ctx, who, hours, buckets)


@router.post("/teams", status_code=status.HTTP_201_CREATED, response_model=TeamView)
def create_team(body: TeamCreate, ctx: PlatformDep, _who: Admin) -> TeamView:
    return identity.create_team(ctx, body.name, body.quota())


@router.put("/teams/{name}/quota", response_model=TeamView)
def set_quota(name: str, body: QuotaIn, ctx: PlatformDep, _who: Admin) -> TeamView:
    """Replace a team's quota: what the body leaves out takes its default, but for
    ``storage``, which stays as it is unless given (``null`` removes it)."""
    return identity.set_quota(
        ctx, name, body.quota(), keep_storage="storage" not in body.model_fields_set
    )


@router.delete("/teams/{name}", response_model=TeamDeletedView)
def delete_team(name: str, ctx: PlatformDep, _who: Admin) -> TeamDeletedView:
    """Delete a team without pending or running jobs (else 409 team_not_empty); its members
    leave it, its finished jobs keep their records. The default team stays."""
    return identity.delete_team(ctx, name)


@router.put("/teams/{name}/members/{user}", response_model=UserView)
def add_member(
    name: str, user: str, ctx: PlatformDep, who: TeamAdmin, body: MemberIn | None = None
) -> UserView:
    """Make a user a member of the team: it sees and submits the team's jobs. ``admin`` in
    the body makes it a team admin of the team, or not; left out, that stays as it was. Pool
    admins and the team's admins may."""
    return identity.add_member(ctx, who, name, user, body.admin if body else None)


@router.delete("/teams/{name}/members/{user}", response_model=UserView)
def remove_member(name: str, user: str, ctx: PlatformDep, who: TeamAdmin) -> UserView:
    """End a user's membership of the team; its jobs there stay in the team. Pool admins
    and the team's admins may."""
    return identity.remove_member(ctx, who, name, user)


@router.post("/whoami/password", response_model=WhoAmIView)
def change_password(
    body: PasswordChange, request: Request, ctx: PlatformDep, who: SignedIn
) -> WhoAmIView:
    """Change your own password: give the current one (unless you have none). Wrong ones
    are throttled as failed sign-ins are; web sessions opened with the old one end."""
    return identity.change_own_password(ctx, who, body.current, body.new, client_address(request))


@router.get("/users", response_model=list[UserView])
def list_users(ctx: PlatformDep, _who: Admin) -> list[UserView]:
    return identity.list_users(ctx)


@router.post("/users", status_code=status.HTTP_201_CREATED, response_model=UserView)
def create_user(body: UserCreate, ctx: PlatformDep, _who: Admin) -> UserView:
    return identity.add_user(
        ctx,
        body.name,
        body.role,
        body.teams,
        password=body.password,
        weight=body.weight,
        unix_user=body.unix_user,
    )


@router.patch("/users/{name}", response_model=UserView)
def update_user(name: str, body: UserUpdate, ctx: PlatformDep, _who: Admin) -> UserView:
    """Change what the body gives; ``unix_user`` null clears it, leaving it out keeps it."""
    return identity.change_user(ctx, name, **body.model_dump(exclude_unset=True))


@router.get("/tokens", response_model=list[TokenView])
def list_tokens(ctx: PlatformDep, who: SignedIn) -> list[TokenView]:
    """Your tokens; an admin's: everyone's."""
    return identity.list_tokens(ctx, who)


@router.post("/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenCreatedView)
def create_token(body: TokenCreate, ctx: PlatformDep, who: SignedIn) -> TokenCreatedView:
    """A new token of yours (admins: of ``user`` too); its secret is shown this once."""
    return identity.create_token(ctx, who, body.name, body.user, body.expires_in_days)


@router.delete("/tokens/{token_id}", response_model=TokenView)
def revoke_token(token_id: Id, ctx: PlatformDep, who: SignedIn) -> TokenView:
    """Revoke one of your tokens (admins: anyone's); web sessions opened with it end."""
    return identity.revoke_token(ctx, who, token_id)
