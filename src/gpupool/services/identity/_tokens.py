"""API tokens as the API sees them: listed, created (shown once) and revoked. Each function
opens its own transaction; ``_auth`` makes and checks the tokens themselves."""

from __future__ import annotations

import gpupool.services.identity._auth as auth
import gpupool.services.identity._users as users
from gpupool.domain.views import TokenCreatedView, TokenView
from gpupool.errors import NotFound
from gpupool.services.core import Principal, Reads, Writes
from gpupool.services.identity._ports import TokenRevokes
from gpupool.services.identity._views import token_view
from gpupool.store.models import UserModel

DAY = 86400.0


def list_tokens(ctx: Reads, who: Principal) -> list[TokenView]:
    """``who``'s tokens; an admin's: everyone's."""
    with ctx.db.reader() as session:
        found = auth.list_tokens(session, None if who.is_admin else who.user_id)
        return [token_view(t, session.get(UserModel, t.user_id).name) for t in found]


def create_token(
    ctx: Writes, who: Principal, name: str, user: str | None, expires_in_days: float | None
) -> TokenCreatedView:
    """A new token of ``who`` (of ``user``: admins only), its secret shown this once."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        if user and user != who.name:
            who.require_admin()
            owner = users.get_user(session, user)
        else:
            owner = session.get(UserModel, who.user_id)
        expires = now + expires_in_days * DAY if expires_in_days else None
        secret, token = auth.create_token(session, owner, name, now, expires)
        return TokenCreatedView(token=secret, **dict(token_view(token, owner.name)))


def revoke_token(ctx: TokenRevokes, who: Principal, token_id: int) -> TokenView:
    """Revoke one of ``who``'s tokens (an admin: anyone's); its web sessions end with it."""
    with ctx.db.session() as session:
        token = auth.revoke_token(session, token_id, who, ctx.clock.now())
        owner = session.get(UserModel, token.user_id)
        if owner is None:
            raise NotFound(f"no token {token_id}")
        shown = token_view(token, owner.name)
    ctx.tokens.clear()
    return shown
