"""Who may call what: every route of the real app, called by every identity, gets what the
rule it declares (src/gpupool/api/access.py) promises that identity.

The matrix is generated from the app's routes, so a new route joins it by itself; a route
that declares no rule, a path template without a factory for its parameters, or a write
without a factory for its body fails here, with the route named and what to add. The rule of
each route is read from the route, never written here: this module only says what each rule
means for each identity (``EXPECTED``) and how to call each route (``PARAMS``, ``BODIES``).

The team admin of the owning team is one identity (tests/support/access_matrix.py): a
member of it that may also change its members (Rule.TEAM_ADMIN), and nothing a pool admin
alone may do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx
import pytest

from gpupool.api.access import Rule
from tests.support.access_matrix import (
    ADMIN,
    ANONYMOUS,
    DEPLOYMENT,
    DISABLED,
    IDENTITIES,
    MEMBER,
    OTHER,
    OWNERS,
    PASSWORD,
    REVOKED,
    SPARE,
    TEAM_ADMIN,
    VIEWER,
    Identity,
    RouteKey,
    Routes,
    World,
    routes_of,
    routes_of_a_new_app,
    running_world,
)


class Outcome(Enum):
    OK = "a 2xx answer"
    ANSWERED = "a 2xx or 3xx answer, never 401, 403 or a way to /login (a public route)"
    TO_SIGN_IN = "a 303 redirect to /login?next=..."
    UNAUTHENTICATED = 401
    FORBIDDEN = 403
    NOT_FOUND = 404  # another team's object is not shown to exist


def _outcomes(**by_identity: Outcome) -> dict[str, Outcome]:
    """An identity's outcome by rule; who cannot sign in gets 401 unless said otherwise."""
    cannot_sign_in = dict.fromkeys((ANONYMOUS, REVOKED, DISABLED), Outcome.UNAUTHENTICATED)
    by_name = {name.replace("_", "-"): outcome for name, outcome in by_identity.items()}
    return cannot_sign_in | by_name


OK, NO, GONE = Outcome.OK, Outcome.FORBIDDEN, Outcome.NOT_FOUND
EXPECTED: dict[Rule, dict[str, Outcome]] = {
    Rule.PUBLIC: dict.fromkeys(IDENTITIES, Outcome.ANSWERED),
    Rule.SIGNED_IN: _outcomes(
        owning_member=OK, owning_viewer=OK, other_team_member=OK, admin=OK, owning_team_admin=OK
    ),
    Rule.TEAM_READ: _outcomes(
        owning_member=OK, owning_viewer=OK, other_team_member=GONE, admin=OK, owning_team_admin=OK
    ),
    Rule.TEAM_WRITE: _outcomes(
        owning_member=OK, owning_viewer=NO, other_team_member=GONE, admin=OK, owning_team_admin=OK
    ),
    Rule.SUBMIT: _outcomes(
        owning_member=OK, owning_viewer=NO, other_team_member=OK, admin=OK, owning_team_admin=OK
    ),
    Rule.TEAM_ADMIN: _outcomes(
        owning_member=NO, owning_viewer=NO, other_team_member=GONE, admin=OK, owning_team_admin=OK
    ),
    # a user's own resource that acts as them (a notebook): the owning member is its owner
    Rule.OWNER: _outcomes(
        owning_member=OK,
        owning_viewer=GONE,
        other_team_member=GONE,
        admin=GONE,
        owning_team_admin=GONE,
    ),
    Rule.ADMIN: _outcomes(
        owning_member=NO, owning_viewer=NO, other_team_member=NO, admin=OK, owning_team_admin=NO
    ),
    # a page of a team's object (a job's page) is a 404 page for another team's member
    Rule.PAGE: dict.fromkeys((ANONYMOUS, REVOKED, DISABLED), Outcome.TO_SIGN_IN)
    | dict.fromkeys((MEMBER, VIEWER, OTHER, ADMIN, TEAM_ADMIN), OK),
}
ERROR_CODES = {401: "unauthenticated", 403: "forbidden", 404: "not_found"}


# -- how to call each route ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The values of a path template's parameters; ``team_owned``: they name an object of
    the owning team (its job, its array)."""

    values: dict[str, Any]
    team_owned: bool = False


Factory = Callable[[World, Identity], Any]


def _job(world: World, _who: Identity) -> Target:
    return Target({"job_id": world.job()}, team_owned=True)


def _fresh_job(world: World, _who: Identity) -> Target:
    return Target({"job_id": world.fresh_job()}, team_owned=True)


def _held_job(world: World, _who: Identity) -> Target:
    return Target({"job_id": world.held_job()}, team_owned=True)


def _ended_job(world: World, _who: Identity) -> Target:
    return Target({"job_id": world.ended_job()}, team_owned=True)


def _array(world: World, _who: Identity) -> Target:
    return Target({"array_id": world.array(), "index": 0}, team_owned=True)


def _fresh_array(world: World, _who: Identity) -> Target:
    return Target({"array_id": world.fresh_array()}, team_owned=True)


def _fresh_node(world: World, _who: Identity) -> Target:
    """A new idle node: an admin's removal or drain of it must succeed (the platform's own
    node, node-a, cannot be removed)."""
    return Target({"name": world.fresh_node()})


def _model(world: World, _who: Identity) -> Target:
    return Target({"name": world.model(), "version": 1}, team_owned=True)


def _dataset(world: World, _who: Identity) -> Target:
    return Target({"name": world.dataset(), "version": 1}, team_owned=True)


def _fresh_dataset(world: World, _who: Identity) -> Target:
    return Target({"name": world.fresh_dataset(), "version": 1}, team_owned=True)


def _fresh_volume(world: World, _who: Identity) -> Target:
    return Target({"name": world.fresh_volume()}, team_owned=True)


def _dataset_blob(world: World, _who: Identity) -> Target:
    return Target({"sha256": hashlib.sha256(world.DATASET_FILE).hexdigest()})


def _fresh_image(world: World, _who: Identity) -> Target:
    return Target({"name": world.fresh_image()}, team_owned=True)


def _fresh_experiment(world: World, _who: Identity) -> Target:
    return Target({"ref": world.fresh_experiment()}, team_owned=True)


def _fresh_environment(world: World, _who: Identity) -> Target:
    return Target({"ref": world.fresh_environment()}, team_owned=True)


def _dataset_page(world: World, _who: Identity) -> Target:
    return Target({"team": OWNERS, "name": world.dataset()}, team_owned=True)


def _environment_page(world: World, _who: Identity) -> Target:
    return Target({"team": OWNERS, "name": world.environment()}, team_owned=True)


def _model_page(world: World, _who: Identity) -> Target:
    return Target({"team": OWNERS, "name": world.model()}, team_owned=True)


def _deployment(world: World, _who: Identity) -> Target:
    return Target({"name": world.deployment()}, team_owned=True)


def _served_model(world: World, _who: Identity) -> Target:
    return Target({"name": world.served_model()}, team_owned=True)


def _fresh_deployment(world: World, _who: Identity) -> Target:
    return Target({"name": world.fresh_deployment()}, team_owned=True)


def _fresh_key(world: World, _who: Identity) -> Target:
    return Target({"name": world.deployment(), "key_id": world.fresh_key()}, team_owned=True)


def _serve(world: World, _who: Identity) -> Target:
    return Target({"name": world.deployment(), "path": "predict"}, team_owned=True)


def _notebook(world: World, _who: Identity) -> Target:
    return Target({"notebook_id": world.notebook()}, team_owned=True)


def _fresh_notebook(world: World, _who: Identity) -> Target:
    return Target({"notebook_id": world.fresh_notebook()}, team_owned=True)


def _stopped_notebook(world: World, _who: Identity) -> Target:
    return Target({"notebook_id": world.stopped_notebook()}, team_owned=True)


def _lab(world: World, _who: Identity) -> Target:
    return Target({"notebook_id": world.notebook(), "path": "api/status"}, team_owned=True)


def _spare_team(_world: World, _who: Identity) -> Target:
    return Target({"name": SPARE})


def _fresh_team(world: World, _who: Identity) -> Target:
    return Target({"name": world.fresh_team()})


def _fresh_member(world: World, _who: Identity) -> Target:
    """A new member of the owning team, whose team admin may change its membership."""
    return Target({"name": OWNERS, "user": world.fresh_user((OWNERS,))}, team_owned=True)


def _fresh_user(world: World, _who: Identity) -> Target:
    return Target({"name": world.fresh_user()})


def _code(world: World, who: Identity) -> Target:
    """A code snapshot the caller uploaded, when it may upload (SUBMIT); for the others, the
    owning member's."""
    uploader = who.name if who.name in (MEMBER, OTHER, ADMIN, TEAM_ADMIN) else MEMBER
    return Target({"ref": world.own_code(uploader)})


def _own_fresh_token(world: World, who: Identity) -> Target:
    """A new token of the caller (a token is its owner's to revoke; anonymous callers are
    given the owning member's)."""
    owner = who.user or world.identities[MEMBER].user
    return Target({"token_id": world.fresh_token(owner)})


# Writes that end, delete or change their object get a new one for each call.
PARAMS: dict[str, Factory] = {
    "/api/v1/jobs/{job_id}": _job,
    "/api/v1/jobs/{job_id}/why": _job,
    "/api/v1/jobs/{job_id}/events": _job,
    "/api/v1/jobs/{job_id}/logs": _job,
    "/api/v1/jobs/{job_id}/logs/stream": _ended_job,
    "/api/v1/jobs/{job_id}/metrics": _job,
    "/api/v1/jobs/{job_id}/metrics/summary": _job,
    "/api/v1/jobs/{job_id}/cancel": _fresh_job,
    "/api/v1/jobs/{job_id}/hold": _held_job,
    "/api/v1/jobs/{job_id}/release": _held_job,
    "/api/v1/jobs/arrays/{array_id}": _array,
    "/api/v1/jobs/arrays/{array_id}/tasks/{index}": _array,
    "/api/v1/jobs/arrays/{array_id}/cancel": _fresh_array,
    "/api/v1/nodes/{name}": _fresh_node,
    "/api/v1/nodes/{name}/drain": _fresh_node,
    "/api/v1/nodes/{name}/undrain": _fresh_node,
    "/api/v1/teams/{name}": _fresh_team,
    "/api/v1/teams/{name}/quota": _spare_team,
    "/api/v1/teams/{name}/members/{user}": _fresh_member,
    "/api/v1/users/{name}": _fresh_user,
    "/api/v1/tokens/{token_id}": _own_fresh_token,
    "/api/v1/code/{ref}": _code,
    "/api/v1/models/{name}": _model,
    "/api/v1/models/{name}/versions": _model,
    "/api/v1/models/{name}/versions/{version}": _model,
    "/models/{team}/{name}": _model_page,
    "/api/v1/environments/{ref}": _fresh_environment,  # GET, and DELETE (a fresh one each call)
    "/environments/{team}/{name}": _environment_page,
    "/datasets/{team}/{name}": _dataset_page,
    "/api/v1/datasets/{name}": _fresh_dataset,  # GET, and DELETE (a fresh one each call)
    "/api/v1/datasets/{name}/uploads": _dataset,
    "/api/v1/datasets/{name}/versions": _dataset,
    "/api/v1/datasets/{name}/versions/{version}": _fresh_dataset,
    "/api/v1/dataset-blobs/{sha256}": _dataset_blob,
    "/api/v1/volumes/{name}": _fresh_volume,  # GET, and DELETE (a fresh one each call)
    "/api/v1/images/{name}": _fresh_image,  # GET, and DELETE (a fresh one each call)
    "/api/v1/scheduler/tunes/{tune_id}": lambda world, _who: Target({"tune_id": world.tune()}),
    "/api/v1/experiments/{ref}": _fresh_experiment,
    "/api/v1/experiments/{ref}/pause": _fresh_experiment,
    "/api/v1/experiments/{ref}/resume": _fresh_experiment,
    "/api/v1/experiments/{ref}/stop": _fresh_experiment,
    "/experiments/{ref}": _fresh_experiment,  # its page
    "/api/v1/deployments/{name}": _deployment,
    "/api/v1/deployments/{name}/scale": _deployment,
    "/api/v1/deployments/{name}/update": _served_model,
    "/api/v1/deployments/{name}/stop": _fresh_deployment,
    "/api/v1/deployments/{name}/keys": _deployment,
    "/api/v1/deployments/{name}/keys/{key_id}": _fresh_key,
    "/deployments/{name}": _deployment,
    "/serve/{name}/{path}": _serve,
    "/api/v1/notebooks/{notebook_id}": _notebook,
    "/api/v1/notebooks/{notebook_id}/stop": _fresh_notebook,
    "/api/v1/notebooks/{notebook_id}/resume": _stopped_notebook,
    "/notebooks/{notebook_id}": _notebook,
    "/notebooks/{notebook_id}/{path}": _lab,
    "/jobs/{job_id}": _job,
    "/api/v1/schemas/{kind}": lambda _world, _who: Target({"kind": "Job"}),
}


def _sign_in(world: World, _who: Identity) -> dict:
    member = world.identities[MEMBER]
    return {"user": member.user, "password": member.token}  # a token is a password too


def _new_password(world: World, who: Identity) -> dict:
    """The caller's own password change: its current password is set first."""
    if who.user is not None:
        world.set_password(who.user, PASSWORD)
    return {"current": PASSWORD, "new": "matrix-password-2"}


BODIES: dict[str, Factory] = {
    "POST /api/v1/session": _sign_in,
    "POST /api/v1/jobs": lambda _world, _who: {"command": ["sleep", "300"]},
    "POST /api/v1/apply": lambda _world, _who: {
        "documents": [{"apiVersion": "gpupool/v1", "kind": "Job", "spec": {"command": ["true"]}}],
        "dry_run": True,
    },
    "POST /api/v1/teams": lambda world, _who: {"name": world.unique("new-team")},
    "PUT /api/v1/teams/{name}/quota": lambda _world, _who: {"weight": 1},
    "PUT /api/v1/teams/{name}/members/{user}": lambda _world, _who: {"admin": False},
    "POST /api/v1/whoami/password": _new_password,
    "POST /api/v1/users": lambda world, _who: {"name": world.unique("new-user")},
    "PATCH /api/v1/users/{name}": lambda _world, _who: {"weight": 2},
    "POST /api/v1/tokens": lambda _world, _who: {"name": "matrix"},
    # raw bodies, read as streams by their routes (so FastAPI knows of no body field)
    "PUT /api/v1/code/{ref}": lambda world, _who: world.code(),
    "POST /api/v1/code": lambda world, _who: world.code(),
    "POST /api/v1/nodes/{name}/drain": lambda _world, _who: {"reason": "matrix"},
    "POST /api/v1/models/{name}/versions": lambda world, _who: {"job_id": world.succeeded_job()},
    "POST /api/v1/datasets/{name}/uploads": lambda world, _who: {
        "manifest": world.dataset_manifest(),
        "team": OWNERS,
    },
    "POST /api/v1/datasets/{name}/versions": lambda world, _who: {
        "manifest": world.dataset_manifest(),
        "team": OWNERS,
    },
    "PUT /api/v1/dataset-blobs/{sha256}": lambda world, _who: world.DATASET_FILE,
    "POST /api/v1/volumes": lambda world, _who: {"name": world.unique("v"), "team": OWNERS},
    # each caller's own team: a new name each call
    "POST /api/v1/experiments": lambda world, _who: {
        "name": world.unique("new-experiment"),
        "objective": {"metric": "loss"},
        "parameters": {"x": {"type": "float", "low": 0, "high": 1}},
        "max_trials": 1,
        "trial": {"command": ["sleep", "300"]},
    },
    # each caller's own team (the admin's too): a new name each call
    "POST /api/v1/environments": lambda world, _who: {
        "name": world.unique("new-env"),
        "requirements": "alpha\n",
    },
    "POST /api/v1/environments/prefixes": lambda world, _who: {
        "name": world.unique("site-env"),
        "path": "/opt/site-env",
    },
    "POST /api/v1/images/pull": lambda world, _who: {"ref": world.image_ref()},
    "POST /api/v1/images/import": lambda world, _who: world.image_archive(),
    "POST /api/v1/deployments": lambda world, _who: {
        "name": world.unique("new-deployment"),
        "command": ["sleep", "300"],
    },
    "POST /api/v1/deployments/{name}/scale": lambda _world, _who: {"replicas": 1},
    "POST /api/v1/deployments/{name}/update": lambda _world, _who: {},
    "POST /api/v1/deployments/{name}/keys": lambda _world, _who: {"name": "matrix"},
    "POST /api/v1/notebooks": lambda _world, _who: {},
    # a new value each call (the same again is refused: settings_unchanged); a rollback to the
    # environment's after an admin's change, so that it changes something too
    "PUT /api/v1/scheduler/config": lambda world, _who: {
        "placement_charge": 600.0 + world.count_up(),
        "reason": "matrix",
    },
    # a dry run on a history too short to tune on: refused at once by the tuning watch
    "POST /api/v1/scheduler/tunes": lambda _world, _who: {"window": 7200, "holdout": 3600},
    "POST /api/v1/scheduler/config/rollback": lambda world, _who: {
        "version": world.scheduler_changed(),
        "reason": "matrix",
    },
    # the matrix's server runs one machine: a join is answered not_a_pool (409)
    "POST /api/v1/cluster/join": lambda _world, _who: {"token": "gpj_not-the-pools"},
}

# Public routes that check a secret of their own in the body, not who calls: the answer every
# identity gets from the matrix's server (the join token: a one-machine server has no pool).
OWN_SECRET: dict[str, int] = {"POST /api/v1/cluster/join": 409}

# A deployment's address, for whom the rule lets in: the matrix's replicas never start, so the
# answer is 503 no_healthy_replica where a served deployment would answer 2xx.
NOT_SERVED: dict[str, tuple[int, str]] = {
    "/serve/{name}/{path}": (503, "no_healthy_replica"),
    "/notebooks/{notebook_id}/{path}": (503, "notebook_not_running"),  # never started here
}

# Routes the framework adds (not APIRoutes: no dependency can carry their rule), each with
# a path to call and its rule.
FRAMEWORK: dict[str, tuple[str | Callable[[World], str], Rule]] = {
    "/api/v1/openapi.json": ("/api/v1/openapi.json", Rule.PUBLIC),
    "/static": ("/static/gpupool.css", Rule.PUBLIC),
    "/api/v1/docs/assets": ("/api/v1/docs/assets/swagger-ui.css", Rule.PUBLIC),
    # a deployment's WebSocket (its HTTP route answers a plain GET of the same path)
    "/serve/{name}/{path:path}": (f"/serve/{DEPLOYMENT}/x", Rule.TEAM_WRITE),
    # a notebook's WebSocket (a kernel's channels): as for its HTTP route
    "/notebooks/{notebook_id}/{path:path}": (
        lambda world: f"/notebooks/{world.notebook()}/api/status",
        Rule.OWNER,
    ),
}


# -- the matrix ----------------------------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each route of the app (read from a new one at collection) is a row of the matrix."""
    if "route" in metafunc.fixturenames:
        routes = routes_of_a_new_app()
        cases = [RouteKey("GET", path) for path in routes.framework] + sorted(routes.declared)
        metafunc.parametrize("route", cases, ids=str)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_world(tmp_path_factory.mktemp("matrix") / "data") as found:
        yield found


@pytest.mark.parametrize("identity", IDENTITIES)
def test_each_identity_gets_what_the_routes_rule_promises(
    world: World, route: RouteKey, identity: str
) -> None:
    rule = _rule(world, route)
    who = world.identities[identity]
    path, target = _path(world, route, who)
    body = _body(world, route, who)
    answer = world.call(route, path, who, body)
    expected = _expected(rule, identity, target)
    if str(route) in OWN_SECRET:  # it checks a secret of its own, the same for everyone
        assert answer.status_code == OWN_SECRET[str(route)], answer.text[:300]
        return
    served = NOT_SERVED.get(route.path) or NOT_SERVED.get(_template(route.path))
    if served is not None and expected == Outcome.OK:
        assert answer.status_code == served[0], answer.text[:300]
        assert _code(answer) in (served[1], None), answer.text[:300]  # None: a HEAD's
        return
    assert _meets(expected, answer), (
        f"{route} as {identity} (rule {rule.value}): expected {expected.value}, "
        f"got {answer.status_code} {answer.headers.get('location', '')} {answer.text[:300]}"
    )


def test_every_route_declares_a_rule(world: World) -> None:
    missing = [str(key) for key, rule in _live(world).declared.items() if rule is None]
    assert not missing, (
        "these routes declare no access rule; give each `who: Annotated[Principal, "
        f"allow(Rule.X)]` or `@declare(Rule.X)` (src/gpupool/api/access.py): {missing}"
    )


def test_every_route_can_be_called(world: World) -> None:
    """Each parametrized path has a factory, each write with a body a body factory, each
    route the framework adds an entry of FRAMEWORK, and each rule a column of outcomes."""
    routes = _live(world)
    lacking = [
        f"PARAMS[{k.path!r}]" for k in routes.declared if "{" in k.path and k.path not in PARAMS
    ]
    lacking += [f"BODIES[{str(k)!r}]" for k in routes.bodies if str(k) not in BODIES]
    lacking += [f"FRAMEWORK[{p!r}]" for p in routes.framework if p not in FRAMEWORK]
    lacking += [f"EXPECTED[{r}]" for r in Rule if set(EXPECTED.get(r, ())) != set(IDENTITIES)]
    assert not lacking, f"add to tests/security/test_access_matrix.py: {sorted(set(lacking))}"


def _live(world: World) -> Routes:
    """The routes of the app under test (the same code as those the matrix was made from)."""
    return world.shared("routes", lambda: routes_of(world.client.app))


def _rule(world: World, route: RouteKey) -> Rule:
    if route.path in _live(world).framework:
        if route.path not in FRAMEWORK:
            pytest.fail(f"{route}: a route the framework adds; add it to FRAMEWORK here")
        return FRAMEWORK[route.path][1]
    rule = _live(world).declared.get(route)
    if rule is None:
        pytest.fail(
            f"{route} declares no access rule: give it `who: Annotated[Principal, "
            "allow(Rule.X)]` or `@declare(Rule.X)` (src/gpupool/api/access.py)"
        )
    return rule


def _path(world: World, route: RouteKey, who: Identity) -> tuple[str, Target]:
    if route.path in FRAMEWORK:
        where = FRAMEWORK[route.path][0]
        return (where(world) if callable(where) else where), Target({})
    if "{" not in route.path:
        return route.path, Target({})
    if route.path not in PARAMS:
        pytest.fail(f"{route}: add a factory for {route.path!r} to PARAMS in this module")
    target = PARAMS[route.path](world, who)
    return route.path.format(**target.values), target


def _body(world: World, route: RouteKey, who: Identity) -> Any:
    if route not in _live(world).bodies and str(route) not in BODIES:
        return None
    if str(route) not in BODIES:
        pytest.fail(f"{route}: add a factory of a valid body for {str(route)!r} to BODIES here")
    return BODIES[str(route)](world, who)


def _expected(rule: Rule, identity: str, target: Target) -> Outcome:
    if rule == Rule.PAGE and target.team_owned and identity == OTHER:
        return Outcome.NOT_FOUND
    return EXPECTED[rule][identity]


def _meets(expected: Outcome, answer: httpx.Response) -> bool:
    status = answer.status_code
    if expected == Outcome.OK:
        return 200 <= status < 300
    if expected == Outcome.ANSWERED:
        return 200 <= status < 300 or (300 <= status < 400 and not _to_sign_in(answer))
    if expected == Outcome.TO_SIGN_IN:
        return status == 303 and _to_sign_in(answer)
    if status != expected.value:
        return False
    is_json = answer.headers.get("content-type", "").startswith("application/json")
    # a HEAD is answered without a body
    return not is_json or not answer.content or _code(answer) == ERROR_CODES[status]


def _template(path: str) -> str:
    """A route the framework adds, by the template of the route of the same path."""
    return path.replace("{path:path}", "{path}")


def _code(answer: httpx.Response) -> str | None:
    return answer.json()["error"]["code"] if answer.content else None


def _to_sign_in(answer: httpx.Response) -> bool:
    return answer.headers.get("location", "").startswith("/login?next=")
