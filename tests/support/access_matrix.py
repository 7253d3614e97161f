"""The world of the access matrix (tests/security/test_access_matrix.py): the routes of the
real app, one in-process platform, the identities that call every route, and the objects
(jobs, arrays, teams, users, tokens) those routes act on.

Identities call the REST API with their bearer token, and web pages with a cookie session
opened through ``POST /api/v1/session`` (its CSRF token sent on unsafe methods), as a browser
does. A team admin of the owning team is one identity too: a member of it that may change
its members.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from sqlalchemy import select

import gpupool.services.cluster._nodes as nodes
from gpupool.api.access import Rule, rule_of
from gpupool.api.app import create_app
from gpupool.api.deps import SAFE_METHODS
from gpupool.domain.datasets import ManifestFile, manifest_bytes
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.web import CSRF_HEADER, SESSION_COOKIE
from gpupool.executors.fake import NeverStartsExecutor
from gpupool.platform import open_platform
from gpupool.services.platform import Platform
from gpupool.store.models import JobModel, TeamModel, UserModel
from tests.support.code import archive, ref, regular
from tests.support.images import ImageConfig, Layout, Registry, base_members, layer
from tests.support.platform import FINAL, admin_token, make_settings, running_app
from tests.support.waiting import wait_for
from tests.support.wheels import index_env, wheelhouse

ANONYMOUS = "anonymous"
MEMBER = "owning-member"  # a member of the team that owns the route's object
VIEWER = "owning-viewer"  # a viewer of that team
OTHER = "other-team-member"  # a member of another team only
ADMIN = "admin"
TEAM_ADMIN = "owning-team-admin"  # a member of the owning team, and a team admin of it
REVOKED = "revoked-token"  # a member of the owning team whose token was revoked
DISABLED = "disabled-user"  # a member of the owning team, disabled after signing in
IDENTITIES = (ANONYMOUS, MEMBER, VIEWER, OTHER, ADMIN, TEAM_ADMIN, REVOKED, DISABLED)

OWNERS, OTHERS, SPARE = "owners", "others", "spare"  # SPARE: a team admins change
PASSWORD = "matrix-password-1"
DEPLOYMENT = "matrix-deployment"


@dataclass(frozen=True, order=True)
class RouteKey:
    """One method of one route, by its path template (``/api/v1/jobs/{job_id}``)."""

    method: str
    path: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def is_page(self) -> bool:
        """Web pages (outside /api) are called as a browser calls them: with a session.
        /serve (a deployment's address) and a notebook's JupyterLab (/notebooks/ID/...) are
        APIs of their own: called with the token."""
        own_api = ("/api/", "/serve/", "/notebooks/{notebook_id}/")
        return not self.path.startswith(own_api)


@dataclass(frozen=True)
class Routes:
    """The routes of an app: its API routes (each with the rule it declares, or None) and the
    paths of the routes the framework adds (mounts of static files, the OpenAPI schema),
    which no dependency can carry a rule for."""

    declared: dict[RouteKey, Rule | None]
    framework: tuple[str, ...]
    bodies: frozenset[RouteKey]  # routes that read a request body


def routes_of(app: FastAPI) -> Routes:
    """Every route of ``app``; routers included into it are walked into (in FastAPI 0.165
    ``app.routes`` holds included routers, not their routes)."""
    declared: dict[RouteKey, Rule | None] = {}
    bodies: set[RouteKey] = set()
    framework: list[str] = []
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if not isinstance(route, APIRoute):
            framework.append(context.path)
            continue
        for method in sorted(context.methods):
            key = RouteKey(method, context.path_format)
            declared[key] = rule_of(route)
            if route.body_field is not None:
                bodies.add(key)
    return Routes(declared, tuple(framework), frozenset(bodies))


def routes_of_a_new_app() -> Routes:
    """The routes of the app on a new platform (a throw-away data directory): what the
    matrix is parametrized by, before its platform exists."""
    with tempfile.TemporaryDirectory(prefix="gpupool-routes-") as base:
        platform = open_platform(make_settings(Path(base) / "data"), NeverStartsExecutor(base))
        try:
            return routes_of(create_app(platform, start_loop=False))
        finally:
            platform.db.dispose()


@dataclass
class Identity:
    """Who calls: a user (None: anonymous), its API token and a web session (both dead for
    the revoked and disabled identities). ``live``: it can open a new session at will."""

    name: str
    user: str | None = None
    token: str | None = None
    session: tuple[str, str] | None = None  # cookie, CSRF token
    live: bool = False


@dataclass
class World:
    """One running app, its identities and the objects routes act on. Shared objects are made
    once; ``fresh_*`` makes a new one for a call that ends, deletes or changes it."""

    client: TestClient
    platform: Platform | None = None  # for objects no route makes (nodes join by themselves)
    identities: dict[str, Identity] = field(default_factory=dict)
    made: dict[str, Any] = field(default_factory=dict)  # shared objects, made on first use
    count: int = 0
    registry: Registry | None = None  # started by the first pull (image_ref)

    # -- calls ---------------------------------------------------------------------------------

    def call(self, key: RouteKey, path: str, who: Identity, body: Any = None) -> httpx.Response:
        """Call ``path`` as ``who``: a page with a session, the API with its token."""
        if key.is_page:
            cookie, csrf = self.page_session(who) or (None, None)
            return self.send(key.method, path, cookie=cookie, csrf=csrf, body=body)
        return self.send(key.method, path, token=who.token, body=body)

    def send(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        cookie: str | None = None,
        csrf: str | None = None,
        body: Any = None,
    ) -> httpx.Response:
        """One request with exactly these credentials: the client's cookie jar is emptied first,
        so that no cookie a response set (a sign-in's) rides along on the next request."""
        self.client.cookies.clear()
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if cookie:
            headers["Cookie"] = f"{SESSION_COOKIE}={cookie}"
        if csrf and method not in SAFE_METHODS:
            headers[CSRF_HEADER] = csrf
        if isinstance(body, bytes):  # a raw body: a code snapshot's archive
            return self.client.request(
                method, path, headers=headers, content=body, follow_redirects=False
            )
        return self.client.request(method, path, headers=headers, json=body, follow_redirects=False)

    def api(self, method: str, path: str, who: str = ADMIN, body: Any = None) -> Any:
        """A set-up call through the API as ``who``, which must succeed."""
        answer = self.send(method, f"/api/v1{path}", token=self.identities[who].token, body=body)
        assert answer.status_code < 300, f"set-up {method} {path}: {answer.text}"
        return answer.json() if answer.content else None

    def sign_in(self, user: str, password: str) -> tuple[str, str]:
        """A new web session of ``user``: its cookie and CSRF token."""
        answer = self.send("POST", "/api/v1/session", body={"user": user, "password": password})
        assert answer.status_code == 200, f"set-up sign-in of {user}: {answer.text}"
        return answer.cookies[SESSION_COOKIE], answer.json()["csrf_token"]

    def page_session(self, who: Identity) -> tuple[str, str] | None:
        """A live identity signs in afresh for each page (a password change ends its
        sessions); the revoked and disabled ones keep the session that was ended."""
        if who.live:
            return self.sign_in(who.user, who.token)
        return who.session

    # -- objects -------------------------------------------------------------------------------

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{self.count_up()}"

    def count_up(self) -> int:
        self.count += 1
        return self.count

    def tune(self) -> int:
        """A tuning of the scheduler's settings (a dry run), asked by the admin once."""
        body = {"window": 7200, "holdout": 3600}
        return self.shared("tune", lambda: self.api("POST", "/scheduler/tunes", ADMIN, body)["id"])

    def scheduler_changed(self) -> int:
        """0 (the environment's settings), after an admin made a version that differs."""
        body = {"placement_charge": 600.0 + self.count_up(), "reason": "matrix set-up"}
        self.api("PUT", "/scheduler/config", ADMIN, body)
        return 0

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self.made:
            self.made[name] = make()
        return self.made[name]

    def job(self) -> int:
        """A live job of the owning team, submitted by its member."""
        return self.shared("job", self.fresh_job)

    def fresh_job(self) -> int:
        return self.api("POST", "/jobs", MEMBER, {"command": ["sleep", "300"]})["id"]

    def held_job(self) -> int:
        """A new job of the owning team submitted held: it stays pending whatever the load,
        so a hold (again) or a release of it succeeds."""
        body = {"command": ["sleep", "300"], "hold": True}
        return self.api("POST", "/jobs", MEMBER, body)["id"]

    def ended_job(self) -> int:
        """A cancelled job of the owning team: a stream of its log ends (the test client
        reads a response whole, so a stream that follows a live job would never return)."""
        return self.shared("ended_job", self._cancelled_job)

    def succeeded_job(self) -> int:
        """A job of the owning team that succeeded and left a file in its outputs (the
        matrix's jobs never run: it is recorded as ended, its outputs written here)."""
        return self.shared("succeeded_job", self._succeeded_job)

    def model(self) -> str:
        """A model of the owning team, with one version (from ``succeeded_job``)."""

        def register() -> str:
            body = {"job_id": self.succeeded_job()}
            return self.api("POST", "/models/matrix-model/versions", MEMBER, body)["name"]

        return self.shared("model", register)

    def deployment(self) -> str:
        """A deployment of the owning team, of a command (its replicas never start here)."""
        return self.shared("deployment", lambda: self._deploy({"name": DEPLOYMENT}))

    def served_model(self) -> str:
        """A deployment of the owning team's model (an update rolls to its latest version)."""
        return self.shared(
            "served", lambda: self._deploy({"name": "matrix-served", "model": self.model()})
        )

    def fresh_deployment(self) -> str:
        return self._deploy({"name": self.unique("deployment")})

    def fresh_key(self) -> int:
        """A new key of ``deployment``, for a call that revokes it."""
        body = {"name": "matrix"}
        return self.api("POST", f"/deployments/{self.deployment()}/keys", MEMBER, body)["id"]

    def _deploy(self, body: dict[str, Any]) -> str:
        body = {"command": ["sleep", "300"]} | body
        return self.api("POST", "/deployments", MEMBER, body)["name"]

    def notebook(self) -> int:
        """A notebook of the owning team's member (its job never starts here)."""
        return self.shared("notebook", self.fresh_notebook)

    def fresh_notebook(self) -> int:
        return self.api("POST", "/notebooks", MEMBER, {})["id"]

    def stopped_notebook(self) -> int:
        """A new notebook of the owning member, stopped: its owner may resume it."""
        notebook = self.fresh_notebook()
        self.api("POST", f"/notebooks/{notebook}/stop", MEMBER)
        # claimed already (the control thread acts at once), its job takes a pass to end
        wait_for(
            lambda: self.api("GET", f"/notebooks/{notebook}", MEMBER)["state"] == "stopped",
            30,
            f"notebook {notebook} stopped",
        )
        return notebook

    def array(self) -> int:
        return self.shared("array", self.fresh_array)

    def fresh_array(self) -> int:
        body = {"command": ["sleep", "300"], "array": {"indexes": "0-1"}}
        return self.api("POST", "/jobs", MEMBER, body)["id"]

    def code(self) -> bytes:
        """The archive of a code snapshot (the same bytes for every caller)."""
        return self.shared("code", lambda: archive(regular("train.py", b"print('matrix')\n")))

    def own_code(self, who: str) -> str:
        """The ref of ``code``, uploaded by ``who``: a snapshot is its uploaders' to use."""
        return self.api("PUT", f"/code/{ref(self.code())}", who, self.code())["ref"]

    # -- datasets: a file and the manifest that lists it, uploaded by the owning member --------

    DATASET_FILE = b"matrix,data\n"

    def dataset_manifest(self) -> str:
        """The SHA-256 of a manifest of one file, both held by the owning team."""

        def upload() -> str:
            data = self.DATASET_FILE
            entry = ManifestFile("data.csv", len(data), 0o644, hashlib.sha256(data).hexdigest())
            manifest = manifest_bytes([entry])
            for blob in (data, manifest):
                self.api("PUT", f"/dataset-blobs/{hashlib.sha256(blob).hexdigest()}", MEMBER, blob)
            return hashlib.sha256(manifest).hexdigest()

        return self.shared("dataset_manifest", upload)

    def dataset(self) -> str:
        """A dataset of the owning team, with one version."""
        return self.shared("dataset", self.fresh_dataset)

    def fresh_dataset(self) -> str:
        name = self.unique("dataset")
        body = {"manifest": self.dataset_manifest(), "team": OWNERS}
        self.api("POST", f"/datasets/{name}/versions", MEMBER, body)
        return name

    # -- Python environments: made by the owning member from the matrix's own wheels ---------

    def environment(self) -> str:
        """An environment of the owning team."""
        return self.shared("environment", self.fresh_environment)

    def fresh_environment(self) -> str:
        name = self.unique("env")
        body = {"name": name, "requirements": "alpha\n", "team": OWNERS}
        return self.api("POST", "/environments", MEMBER, body)["name"]

    # -- container images: an archive the owning member imports; a registry for pulls --------

    def image_archive(self) -> bytes:
        """An OCI archive of a small image (the same bytes for every caller)."""

        def build() -> bytes:
            with tempfile.TemporaryDirectory(prefix="gpupool-matrix-image-") as base:
                layout = Layout(Path(base) / "layout")
                layout.add("matrix/tool:1", [layer(base_members())], ImageConfig())
                return layout.oci_archive("matrix/tool:1", Path(base) / "image.tar").read_bytes()

        return self.shared("image_archive", build)

    def fresh_image(self) -> str:
        name = f"{self.unique('image')}:1"
        path = f"/images/import?name={name}&team={OWNERS}"
        return self.api("POST", path, MEMBER, self.image_archive())["name"]

    def image_ref(self) -> str:
        """An image in a registry the platform allows (started on first use)."""

        def push() -> str:
            assert self.platform is not None
            self.registry = Registry(Path(tempfile.mkdtemp(prefix="gpupool-matrix-registry-")))
            self.registry.start()
            self.platform.settings.image_registries = f"{self.registry.host}=insecure"
            return self.registry.push("matrix/pulled", [layer(base_members())])

        return self.shared("image_ref", push)

    def fresh_volume(self) -> str:
        """A new volume of the owning team."""
        body = {"name": self.unique("volume"), "team": OWNERS}
        return self.api("POST", "/volumes", MEMBER, body)["name"]

    def fresh_experiment(self) -> str:
        """A new experiment of the owning team (its one trial sleeps)."""
        body = {
            "name": self.unique("experiment"),
            "team": OWNERS,
            "objective": {"metric": "loss"},
            "parameters": {"x": {"type": "float", "low": 0, "high": 1}},
            "max_trials": 1,
            "trial": {"command": ["sleep", "300"]},
        }
        return str(self.api("POST", "/experiments", MEMBER, body)["id"])

    def fresh_team(self) -> str:
        return self.api("POST", "/teams", ADMIN, {"name": self.unique("team")})["name"]

    def fresh_user(self, teams: tuple[str, ...] = (SPARE,)) -> str:
        body = {"name": self.unique("user"), "teams": list(teams)}
        return self.api("POST", "/users", ADMIN, body)["name"]

    def fresh_token(self, user: str) -> int:
        return self.api("POST", "/tokens", ADMIN, {"user": user, "name": "matrix"})["id"]

    def fresh_node(self) -> str:
        """A node that joins drained, as the cluster side registers one: no job is placed on
        it, so an admin may remove it."""
        assert self.platform is not None
        name, now = self.unique("node"), self.platform.clock.now()
        inventory = NodeInventory(name=name, cpus=1, memory_bytes=1024**3)
        with self.platform.db.session() as session:
            node = nodes.register(session, inventory, now)
            nodes.set_drain(session, node, now, "access matrix", None)
        return name

    def set_password(self, user: str, password: str) -> None:
        self.api("PATCH", f"/users/{user}", ADMIN, {"password": password})

    def _cancelled_job(self) -> int:
        job_id = self.fresh_job()
        self.api("POST", f"/jobs/{job_id}/cancel", MEMBER)

        def ended() -> bool:
            return self.api("GET", f"/jobs/{job_id}")["status"] in FINAL

        wait_for(ended, 30, f"job {job_id} to end", 0.05)
        return job_id

    def _succeeded_job(self) -> int:
        assert self.platform is not None
        now = self.platform.clock.now()
        with self.platform.db.session() as session:
            member = session.scalars(select(UserModel).where(UserModel.name == MEMBER)).one()
            team = session.scalars(select(TeamModel).where(TeamModel.name == OWNERS)).one()
            job = JobModel(
                user_id=member.id,
                team_id=team.id,
                spec={"command": ["python", "train.py"]},
                status="succeeded",
                submitted_at=now,
                ended_at=now,
            )
            session.add(job)
            session.flush()
            job_id = job.id
        executor = self.platform.executor
        assert isinstance(executor, NeverStartsExecutor)
        outputs = executor.root / str(job_id) / "outputs"
        outputs.mkdir(parents=True)
        (outputs / "model.bin").write_bytes(b"matrix weights")
        return job_id


@contextmanager
def running_world(data_dir: Path) -> Iterator[World]:
    """The app on a platform with a real SQLite file whose jobs never start, and the teams,
    users, tokens and sessions of every identity."""
    # Revoked and disabled tokens count as failed attempts of one address (the test
    # client's): the matrix sends more of them than a real client's limit, which
    # tests/security/test_sign_in.py tests.
    wheels = wheelhouse(data_dir.parent / "wheels")  # environments resolve from it alone
    settings = make_settings(
        data_dir,
        signin_max_per_address=1_000_000,
        signin_max_per_user=1_000_000,
        **{name.removeprefix("GPUPOOL_").lower(): v for name, v in index_env(wheels).items()},
    )
    executor = NeverStartsExecutor(data_dir.parent / "never-started")
    with running_app(settings, executor) as (client, platform):
        client.headers.pop("Authorization")  # each call says who it is
        world = World(client, platform)
        world.identities[ADMIN] = Identity(ADMIN, ADMIN, admin_token(platform), live=True)
        _populate(world)
        try:
            yield world
        finally:
            if world.registry is not None:
                world.registry.stop()


def _populate(world: World) -> None:
    for team in (OWNERS, OTHERS, SPARE):
        world.api("POST", "/teams", ADMIN, {"name": team})
    world.identities[ANONYMOUS] = Identity(ANONYMOUS)
    for name, team, role in ((MEMBER, OWNERS, "member"), (VIEWER, OWNERS, "viewer")):
        world.identities[name] = _identity(world, name, team, role)
    world.identities[OTHER] = _identity(world, OTHER, OTHERS, "member")
    world.identities[TEAM_ADMIN] = _identity(world, TEAM_ADMIN, OWNERS, "member")
    world.api("PUT", f"/teams/{OWNERS}/members/{TEAM_ADMIN}", ADMIN, {"admin": True})
    world.identities[REVOKED] = _ended(world, REVOKED, revoke=True)
    world.identities[DISABLED] = _ended(world, DISABLED, revoke=False)
    world.deployment()  # named in a route the framework adds (/serve's WebSocket)


def _identity(world: World, name: str, team: str, role: str) -> Identity:
    world.api("POST", "/users", ADMIN, {"name": name, "teams": [team], "role": role})
    token = world.api("POST", "/tokens", ADMIN, {"user": name, "name": "matrix"})["token"]
    return Identity(name, name, token, live=True)


def _ended(world: World, name: str, revoke: bool) -> Identity:
    """A member of the owning team, signed in with its token; then the token is revoked, or
    the user disabled: both its token and its session must stop working."""
    found = _identity(world, name, OWNERS, "member")
    found.session, found.live = world.sign_in(name, found.token), False
    if revoke:
        token_id = next(t["id"] for t in world.api("GET", "/tokens") if t["user"] == name)
        world.api("DELETE", f"/tokens/{token_id}")
    else:
        world.api("PATCH", f"/users/{name}", ADMIN, {"disabled": True})
    return found
