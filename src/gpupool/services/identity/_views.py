"""Users' and tokens' rows turned into read models (``gpupool.domain.views``).

Each function reads only what its row has loaded or can load, so services call them while
their transaction is open; what they return holds no row and loads nothing later.
"""

from __future__ import annotations

from gpupool.domain.jobs import Role
from gpupool.domain.views import TokenView, UserView, WhoAmIView
from gpupool.store.models import TokenModel, UserModel


def user_view(user: UserModel) -> UserView:
    return UserView(
        id=user.id,
        name=user.name,
        role=Role(user.role),
        teams=sorted(t.name for t in user.teams),
        disabled=user.disabled,
        has_password=user.password_hash is not None,
        weight=user.weight,
        unix_user=user.unix_user,
        admin_of=sorted(t.name for t in user.admin_of),
    )


def token_view(token: TokenModel, owner: str) -> TokenView:
    return TokenView(
        id=token.id,
        user=owner,
        name=token.name,
        prefix=token.prefix,
        created_at=token.created_at,
        last_used_at=token.last_used_at,
        expires_at=token.expires_at,
        revoked=token.revoked_at is not None,
    )


def who_am_i(user: UserModel, csrf_token: str | None = None) -> WhoAmIView:
    """The user as it sees itself (``csrf_token``: its web session's, just after sign-in)."""
    teams = sorted(t.name for t in user.teams)
    admin_of = sorted(t.name for t in user.admin_of)
    return WhoAmIView(
        user=user.name, role=Role(user.role), teams=teams, admin_of=admin_of, csrf_token=csrf_token
    )
