"""Teams, users and API tokens."""

from __future__ import annotations

from fastapi import APIRouter, status

from gpupool.api.deps import Id, PlatformDep, PrincipalDep
from gpupool.api.schemas import (
    TeamCreate,
    TeamOut,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UserCreate,
    UserOut,
    UserUpdate,
)
from gpupool.errors import NotFound
from gpupool.services import auth, users
from gpupool.store.models import TokenModel, UserModel

router = APIRouter(tags=["admin"])
DAY = 86400.0


@router.get("/teams", response_model=list[TeamOut])
def list_teams(ctx: PlatformDep, who: PrincipalDep) -> list[TeamOut]:
    with ctx.db.reader() as session:
        teams = users.list_teams(session)
        visible = [t for t in teams if who.can_see_team(t.id)]
        return [TeamOut(id=t.id, name=t.name) for t in visible]


@router.post("/teams", status_code=status.HTTP_201_CREATED, response_model=TeamOut)
def create_team(body: TeamCreate, ctx: PlatformDep, who: PrincipalDep) -> TeamOut:
    who.require_admin()
    with ctx.db.session() as session:
        team = users.create_team(session, body.name, ctx.clock.now())
        return TeamOut(id=team.id, name=team.name)


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
            session, body.name, body.role, body.teams, ctx.clock.now(), password=body.password
        )
        return user_out(user)


@router.patch("/users/{name}", response_model=UserOut)
def update_user(name: str, body: UserUpdate, ctx: PlatformDep, who: PrincipalDep) -> UserOut:
    who.require_admin()
    with ctx.db.session() as session:
        user = users.update_user(session, name, **body.model_dump(exclude_unset=True))
        out = user_out(user)
    ctx.tokens.clear()
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


def user_out(user: UserModel) -> UserOut:
    return UserOut(
        id=user.id,
        name=user.name,
        role=user.role,
        teams=sorted(t.name for t in user.teams),
        disabled=user.disabled,
        has_password=user.password_hash is not None,
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
