"""Who may call a deployment at /serve/NAME/..., and its keys.

A deployment answers the members of its team (and admins), signed in with the platform's
session cookie or an API token, and the holders of a key made for that deployment
(``gpupool deploy key create NAME``; shown once, stored as its hash). Anyone else is told
it does not exist (404) — a viewer of its team, who sees it, is told no (403). The routing
table the deployments' loop publishes answers these questions without a database read.
"""

from __future__ import annotations

from sqlalchemy import select

from gpupool.domain.deployments import KEY_PREFIX, KeyCreatedView, KeyView
from gpupool.errors import Forbidden, NoHealthyReplica, NotFound
from gpupool.services.access import Principal
from gpupool.services.context import Context
from gpupool.services.deployments import get_deployment
from gpupool.services.passwords import new_secret, secret_hash
from gpupool.services.routing import Route
from gpupool.store.models import DeploymentKeyModel, DeploymentModel, UserModel

# -- /serve --------------------------------------------------------------------------------------


def is_key(secret: str) -> bool:
    """A deployment key (not an API token): told apart by its prefix."""
    return secret.startswith(f"{KEY_PREFIX}_")


def route_for_key(ctx: Context, name: str, secret: str) -> Route:
    """The route of ``name`` for the holder of key ``secret``; NotFound unless it is a live
    key of that deployment (another deployment's key, a revoked one, a made-up one)."""
    route = ctx.deployments.routes.route(name)
    if route is None or secret_hash(secret) not in route.key_hashes:
        raise NotFound(_unknown(name))
    return _serving(route)


def route_for(ctx: Context, who: Principal, name: str) -> Route:
    """The route of ``name`` for a signed-in caller: its team's members and admins; a viewer
    of the team is refused (403); others are told it does not exist (404)."""
    route = ctx.deployments.routes.route(name)
    if route is None or not who.can_see_team(route.team_id):
        raise NotFound(_unknown(name))
    if not who.can_act_on_team(route.team_id):
        raise Forbidden(
            f"viewers of a team see its deployments but do not call them: ask for a key "
            f"(gpupool deploy key create {name}) or for the member role"
        )
    return _serving(route)


def _serving(route: Route) -> Route:
    if not route.replicas:
        raise NoHealthyReplica(
            f"deployment {route.name} has no healthy replica right now (starting, restarting "
            f"or failing its health checks): try again shortly; 'gpupool deploy show "
            f"{route.name}' says why"
        )
    return route


# -- keys ----------------------------------------------------------------------------------------


def create_key(ctx: Context, who: Principal, name: str, key_name: str) -> KeyCreatedView:
    """A new key for deployment ``name``: its secret is in this answer only."""
    secret, now = new_secret(KEY_PREFIX), ctx.clock.now()
    with ctx.db.session() as session:
        deployment = _own(session, who, name)
        key = DeploymentKeyModel(
            deployment_id=deployment.id,
            name=key_name,
            key_hash=secret_hash(secret),
            prefix=secret[:10],
            created_at=now,
            created_by=who.user_id,
        )
        session.add(key)
        session.flush()
        shown = KeyCreatedView(**dict(_view(key, name, who.name)), key=secret)
    ctx.deployments.changed(name)
    return shown


def list_keys(ctx: Context, who: Principal, name: str) -> list[KeyView]:
    with ctx.db.reader() as session:
        deployment = _own(session, who, name)
        rows = session.execute(
            select(DeploymentKeyModel, UserModel.name)
            .join(UserModel, UserModel.id == DeploymentKeyModel.created_by)
            .where(DeploymentKeyModel.deployment_id == deployment.id)
            .order_by(DeploymentKeyModel.id)
        ).all()
        return [_view(key, name, creator) for key, creator in rows]


def revoke_key(ctx: Context, who: Principal, name: str, key_id: int) -> KeyView:
    """Revoke a key of ``name``: it stops working before this returns."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        deployment = _own(session, who, name)
        key = session.get(DeploymentKeyModel, key_id)
        if key is None or key.deployment_id != deployment.id:
            raise NotFound(f"deployment {name} has no key {key_id}: 'gpupool deploy key ls {name}'")
        if key.revoked_at is None:
            key.revoked_at = now
        creator = session.get(UserModel, key.created_by)
        shown = _view(key, name, creator.name if creator else "?")
    ctx.deployments.changed(name)
    return shown


def _own(session, who: Principal, name: str) -> DeploymentModel:  # noqa: ANN001
    """The deployment, for a member of its team (or an admin): keys are its to give."""
    deployment = get_deployment(session, who, name)
    who.require_member()
    if not who.can_act_on_team(deployment.team_id):
        raise NotFound(_unknown(name))
    return deployment


def _view(key: DeploymentKeyModel, deployment: str, creator: str) -> KeyView:
    return KeyView(
        id=key.id,
        deployment=deployment,
        name=key.name,
        prefix=key.prefix,
        created_at=key.created_at,
        created_by=creator,
        revoked=key.revoked_at is not None,
    )


def _unknown(name: str) -> str:
    return f"no deployment {name} that you may call: list yours with 'gpupool deploy ls'"
