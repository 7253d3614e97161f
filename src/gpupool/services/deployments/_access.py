"""Who may call a deployment at /serve/NAME/... (or /serve/NAME@TEAM/...), and its keys.

A deployment answers the members of its team (and admins), signed in with the platform's
session cookie or an API token, and the holders of a key made for that deployment
(``gpupool deploy key create NAME``; shown once, stored as its hash). Anyone else is told
it does not exist (404) — a viewer of its team, who sees it, is told no (403). The proxy's
routing table answers these questions without a database read, by this capability's rule
(``admit``), on the routes the rollouts pipeline publishes.

A name is unique in a team, not in the pool. ``NAME`` alone means the one deployment of
that name the caller sees (or, of several, the one they may call); where several of their
teams have one, 409 ambiguous_deployment names the ``NAME@TEAM`` addresses. A caller never
learns that a team they do not see has a deployment of a name: it is not looked at.
"""

from __future__ import annotations

from sqlalchemy import select

from gpupool.domain.deployments import (
    KEY_PREFIX,
    KeyCreatedView,
    KeyView,
    serve_url,
    split_address,
)
from gpupool.errors import AmbiguousDeployment, Forbidden, NoHealthyReplica, NotFound
from gpupool.proxy import KeyHolder, Route, Who
from gpupool.services.core import Principal, Reads
from gpupool.services.deployments._deployments import get_deployment
from gpupool.services.deployments._ports import DeploymentContext
from gpupool.services.identity import new_secret, secret_hash
from gpupool.store.models import DeploymentKeyModel, DeploymentModel, UserModel

# -- /serve --------------------------------------------------------------------------------------


def is_key(secret: str) -> bool:
    """A deployment key (not an API token): told apart by its prefix."""
    return secret.startswith(f"{KEY_PREFIX}_")


def key_holder(secret: str) -> KeyHolder:
    """The caller who shows key ``secret`` (known by its hash alone)."""
    return KeyHolder(secret_hash(secret))


def published_under(address: str) -> str:
    """The key a deployment's route is published under: its name (``NAME@TEAM`` → NAME)."""
    return split_address(address)[0]


def admit(routes: tuple[Route, ...], address: str, caller: Who | KeyHolder) -> Route:
    """The proxy table's rule for deployments: of the live ones called as ``address`` says
    (NAME or NAME@TEAM), the one ``caller`` may call. A key holder: the deployment that key
    is of (NotFound for another's key, a revoked one, a made-up one: a key settles which).
    A signed-in caller: its team's members and admins; a viewer of the team is refused
    (403); others are told it does not exist (404); several of the caller's teams with
    NAME: 409 ambiguous_deployment. NoHealthyReplica when the one meant has none ready."""
    _, team = split_address(address)
    named = [route for route in routes if team is None or route.team == team]
    if isinstance(caller, KeyHolder):
        for route in named:
            if caller.key_hash in route.key_hashes:
                return _serving(route)
        raise unknown(address)
    route = _pick(caller, address, [r for r in named if caller.can_see_team(r.team_id)])
    if not caller.can_act_on_team(route.team_id):
        raise Forbidden(
            f"viewers of a team see its deployments but do not call them: ask for a key "
            f"(gpupool deploy key create {route.name} --team {route.team}) or for the member "
            "role"
        )
    return _serving(route)


def _pick(who: Who, address: str, seen: list[Route]) -> Route:
    """Of the deployments of a name that ``who`` sees, the one meant: the only one, else the
    only one ``who`` may call; none: 404; several: 409 naming each one's team address."""
    if len(seen) == 1:
        return seen[0]
    callable_ = [route for route in seen if who.can_act_on_team(route.team_id)]
    if len(callable_) == 1:
        return callable_[0]
    if not seen:
        raise unknown(address)
    addresses = [serve_url(route.name, route.team) for route in seen]
    raise AmbiguousDeployment(
        f"several of your teams have a deployment {seen[0].name}: call the one you mean at "
        f"its team's address, {' or '.join(addresses)}",
        addresses=addresses,
    )


def _serving(route: Route) -> Route:
    if not route.upstreams:
        raise NoHealthyReplica(
            f"deployment {route.name} has no healthy replica right now (starting, restarting "
            f"or failing its health checks): try again shortly; 'gpupool deploy show "
            f"{route.name}' says why"
        )
    return route


# -- keys ----------------------------------------------------------------------------------------


def create_key(
    ctx: DeploymentContext, who: Principal, name: str, key_name: str, team: str | None = None
) -> KeyCreatedView:
    """A new key for deployment ``name`` (of ``team``): its secret is in this answer only."""
    secret, now = new_secret(KEY_PREFIX), ctx.clock.now()
    with ctx.db.session() as session:
        deployment = _own(session, who, name, team)
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


def list_keys(ctx: Reads, who: Principal, name: str, team: str | None = None) -> list[KeyView]:
    with ctx.db.reader() as session:
        deployment = _own(session, who, name, team)
        rows = session.execute(
            select(DeploymentKeyModel, UserModel.name)
            .join(UserModel, UserModel.id == DeploymentKeyModel.created_by)
            .where(DeploymentKeyModel.deployment_id == deployment.id)
            .order_by(DeploymentKeyModel.id)
        ).all()
        return [_view(key, name, creator) for key, creator in rows]


def revoke_key(
    ctx: DeploymentContext, who: Principal, name: str, key_id: int, team: str | None = None
) -> KeyView:
    """Revoke a key of ``name``: it stops working before this returns."""
    now = ctx.clock.now()
    with ctx.db.session() as session:
        deployment = _own(session, who, name, team)
        key = session.get(DeploymentKeyModel, key_id)
        if key is None or key.deployment_id != deployment.id:
            raise NotFound(f"deployment {name} has no key {key_id}: 'gpupool deploy key ls {name}'")
        if key.revoked_at is None:
            key.revoked_at = now
        creator = session.get(UserModel, key.created_by)
        shown = _view(key, name, creator.name if creator else "?")
    ctx.deployments.changed(name)
    return shown


def _own(session, who: Principal, name: str, team: str | None) -> DeploymentModel:  # noqa: ANN001
    """The deployment, for a member of its team (or an admin): keys are its to give."""
    deployment = get_deployment(session, who, name, team)
    who.require_member()
    if not who.can_act_on_team(deployment.team_id):
        raise unknown(name)
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


def unknown(name: str) -> NotFound:
    """What a caller is told of a deployment they may not call, or that is not there."""
    return NotFound(f"no deployment {name} that you may call: list yours with 'gpupool deploy ls'")
