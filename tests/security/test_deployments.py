"""Deployments, attacked: who may call /serve/NAME/ (HTTP and WebSocket) and the management
API (another team's member, a viewer, a revoked key, another deployment's key, no
credentials), what reaches a replica (never the platform's cookie, the caller's token or a
key), and what a replica can reach (not another deployment's model files, not the server's
database of keys, not a write into its own read-only model; none of ``hostile.ACTIONS``
against another team's running job and the server)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gpupool.domain.deployments import REPLICA_TOKEN_HEADER as TOKEN_HEADER
from tests.security import hostile
from tests.security.conftest import Pool
from tests.security.test_hostile_job import VICTIM, _targets
from tests.support import replica_probe
from tests.support.cli import Cli
from tests.support.proxying import echo_command
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

FINAL = {"succeeded", "failed", "cancelled", "lost"}
PROBE = [sys.executable, "-c", replica_probe.source()]


@dataclass
class World:
    server: ServerProcess
    admin: httpx.Client
    clients: dict[str, httpx.Client] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)  # deployment -> its replica's job

    def serve(
        self, name: str, path: str = "/echo", secret: str | None = None, **kw
    ) -> httpx.Response:  # noqa: ANN003, E501
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        headers |= kw.pop("headers", {})
        return httpx.request(
            kw.pop("method", "GET"), f"{self.server.url}/serve/{name}{path}", headers=headers, **kw
        )

    def model_dir(self, deployment: str) -> Path:
        return self.server.data_dir / "jobs" / str(self.jobs[deployment]) / "model"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    base = Path(tempfile.mkdtemp(prefix="gpupool-deploy-sec-", dir="/tmp"))
    base.chmod(0o755)
    home = base / "home"  # the server's: the admin's saved CLI token goes there
    home.mkdir()
    env = {"GPUPOOL_DEPLOY_HEALTH_INTERVAL_SECONDS": "0.5", "HOME": str(home)}
    server = ServerProcess(base / "data", env=env).start()
    admin = httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.token}"}
    )
    found = World(server, admin)
    try:
        _populate(found)
        yield found
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _populate(world: World) -> None:
    for team in ("owners", "others"):
        assert world.admin.post("/teams", json={"name": team}).status_code == 201
    for name, team, role in (
        ("member", "owners", "member"),
        ("viewer", "owners", "viewer"),
        ("outsider", "others", "member"),
    ):
        body = {"name": name, "teams": [team], "role": role}
        assert world.admin.post("/users", json=body).status_code == 201
        token = world.admin.post("/tokens", json={"user": name, "name": "t"}).json()["token"]
        world.tokens[name] = token
        world.clients[name] = httpx.Client(
            base_url=f"{world.server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}
        )
    _deploy(world, "member", "probe-a", b"weights-of-a")
    _deploy(world, "outsider", "probe-b", b"weights-of-b")
    echo = {"name": "echo-a", "command": echo_command(), "replicas": 1}  # WebSockets too
    assert world.clients["member"].post("/deployments", json=echo).status_code == 201
    for name in ("probe-a", "probe-b", "echo-a"):
        wait_for(lambda n=name: _ready(world, n), 90, f"{name} to be ready", 0.2)
    world.keys["a"] = _key(world, "member", "probe-a")
    world.keys["b"] = _key(world, "outsider", "probe-b")
    revoked = world.clients["member"].post("/deployments/probe-a/keys", json={"name": "old"})
    world.keys["revoked"] = revoked.json()["key"]
    gone = world.clients["member"].delete(f"/deployments/probe-a/keys/{revoked.json()['id']}")
    assert gone.status_code == 200 and gone.json()["revoked"]


def _deploy(world: World, user: str, name: str, weights: bytes) -> None:
    """A model of ``user``'s team holding ``weights``, deployed with the probe as command."""
    api = world.clients[user]
    write = f'printf {weights.decode()} > "$GPUPOOL_OUTPUT_DIR/weights.bin"'
    job = api.post("/jobs", json={"command": ["sh", "-c", write]}).json()["id"]
    wait_for(lambda: api.get(f"/jobs/{job}").json()["status"] in FINAL, 60, f"job {job}", 0.1)
    assert api.post(f"/models/{name}/versions", json={"job_id": job}).status_code == 201
    body = {"model": name, "replicas": 1, "command": PROBE}
    answer = api.post("/deployments", json=body)
    assert answer.status_code == 201, answer.text


def _ready(world: World, name: str) -> bool:
    found = world.admin.get(f"/deployments/{name}").json()
    if found["ready"] < 1:
        return False
    world.jobs[name] = found["replica_list"][0]["job_id"]
    return True


def _key(world: World, user: str, name: str) -> str:
    made = world.clients[user].post(f"/deployments/{name}/keys", json={"name": "k"})
    assert made.status_code == 201, made.text
    return made.json()["key"]


def test_serve_answers_its_team_and_its_keys_and_nobody_else(world: World) -> None:
    assert world.serve("probe-a", secret=world.tokens["member"]).status_code == 200
    assert world.serve("probe-a", secret=world.keys["a"]).status_code == 200
    assert world.serve("probe-a", secret=world.server.token).status_code == 200  # an admin
    refusals = {
        "another team's member": (world.tokens["outsider"], 404),
        "a viewer of its team": (world.tokens["viewer"], 403),
        "a revoked key": (world.keys["revoked"], 404),
        "another deployment's key": (world.keys["b"], 404),
        "a made-up key": ("gpd_" + "x" * 43, 404),
        "nobody": (None, 401),
    }
    got = {
        who: world.serve("probe-a", secret=secret).status_code
        for who, (secret, _) in refusals.items()
    }
    assert got == {who: status for who, (_, status) in refusals.items()}
    key_b_on_b = world.serve("probe-b", secret=world.keys["b"])
    assert key_b_on_b.status_code == 200  # the key is good, only not for probe-a
    posted = world.serve("probe-a", "/probe", world.keys["b"], method="POST", json={})
    assert posted.status_code == 404


def test_the_management_api_shows_nothing_to_another_team(world: World) -> None:
    outsider, viewer = world.clients["outsider"], world.clients["viewer"]
    assert "probe-a" not in [d["name"] for d in outsider.get("/deployments").json()]
    for method, path, body in (
        ("GET", "/deployments/probe-a", None),
        ("POST", "/deployments/probe-a/scale", {"replicas": 3}),
        ("POST", "/deployments/probe-a/update", {}),
        ("POST", "/deployments/probe-a/stop", None),
        ("GET", "/deployments/probe-a/keys", None),
        ("POST", "/deployments/probe-a/keys", {"name": "mine"}),
        ("DELETE", "/deployments/probe-a/keys/1", None),
    ):
        answer = outsider.request(method, path, json=body)
        assert answer.status_code == 404, (method, path, answer.text)
        if method != "GET" or path.endswith("keys"):
            assert viewer.request(method, path, json=body).status_code == 403, (method, path)
    assert viewer.get("/deployments/probe-a").status_code == 200
    assert world.admin.get("/deployments/probe-a").json()["replicas"] == 1  # nothing changed


def test_the_proxy_never_forwards_the_cookie_the_token_or_the_key(world: World) -> None:
    signed = httpx.post(
        f"{world.server.url}/api/v1/session",
        json={"user": "member", "password": world.tokens["member"]},
    )
    cookie = signed.cookies["gpupool_session"]
    secrets = (world.tokens["member"], world.keys["a"], cookie)
    for credential in (
        {"secret": world.tokens["member"]},
        {"secret": world.keys["a"]},
        {"headers": {"Cookie": f"gpupool_session={cookie}; theirs=kept"}},
    ):
        answer = world.serve("probe-a", "/echo?q=1", **credential)
        assert answer.status_code == 200, answer.text
        seen = answer.json()
        text = str(seen["headers"])
        assert not any(secret in text for secret in secrets), seen["headers"]
        assert "authorization" not in text.lower() and "gpupool_session" not in text
        assert seen["path"] == "/echo?q=1"
    kept = world.serve("probe-a", headers={"Cookie": f"gpupool_session={cookie}; theirs=kept"})
    assert "theirs=kept" in str(kept.json()["headers"])
    forged = world.serve("probe-a", secret=world.keys["a"], headers={TOKEN_HEADER: "forged"})
    assert _replica_tokens(forged.json()["headers"]) == _replica_tokens(kept.json()["headers"])


def _replica_tokens(headers: list[list[str]]) -> list[str]:
    """The replica token headers a replica got: exactly one, the platform's (not forged)."""
    found = [value for name, value in headers if name.lower() == TOKEN_HEADER.lower()]
    assert len(found) == 1 and found[0] != "forged" and len(found[0]) >= 32, found
    return found


def test_what_a_replica_answers_never_runs_as_a_page_of_the_platform(world: World) -> None:
    """A replica's HTML, opened by a signed-in user, would run on the platform's origin with
    that user's cookie: every answer of /serve is sandboxed (no script, an opaque origin)."""
    for answer in (
        world.serve("probe-a", secret=world.keys["a"]),
        world.serve("probe-a", secret=world.tokens["outsider"]),  # a refusal too
        world.serve("probe-a"),
    ):
        assert answer.headers["content-security-policy"] == "sandbox", answer.status_code
        assert answer.headers["x-content-type-options"] == "nosniff"


def test_a_replica_reaches_neither_another_deployments_model_nor_the_keys(world: World) -> None:
    own, other = world.model_dir("probe-a"), world.model_dir("probe-b")
    data = world.server.data_dir
    database = data / "gpupool.db"
    asked = {
        "read": [str(other / "weights.bin"), str(database), str(own / "weights.bin")],
        "list": [str(other), str(data), str(data / "jobs"), str(data / "models")],
        "write": [str(own / "weights.bin"), str(own / "evil")],
    }
    answer = world.serve("probe-a", "/probe", world.keys["a"], method="POST", json=asked)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found.pop(f"read {own / 'weights.bin'}") == "read"  # its own model: read-only
    # of the data directory, only the way to its own directories
    assert found.pop(f"list {data}") == "listed: ['jobs']"
    assert found.pop(f"list {data / 'jobs'}") == f"listed: ['{world.jobs['probe-a']}']"
    assert {k: v for k, v in found.items() if not v.startswith("blocked")} == {}, found
    echo = world.serve("probe-a", secret=world.keys["a"]).json()
    assert echo["model_dir"] == str(own) and echo["files"] == ["weights.bin"]
    assert (own / "weights.bin").read_bytes() == b"weights-of-a"


def test_a_websocket_reaches_the_replica_for_its_team_only(world: World) -> None:
    url = world.server.url.replace("http://", "ws://") + "/serve/echo-a/ws"
    member = {"Authorization": f"Bearer {world.tokens['member']}", TOKEN_HEADER: "forged"}
    with connect(url, additional_headers=member) as ws:
        said = json.loads(ws.recv())
        ws.send("hello")
        assert ws.recv() == "hello"
    assert said["path"] == "/ws" and world.tokens["member"] not in str(said["headers"])
    _replica_tokens(said["headers"])  # the platform's, added after the client's was dropped
    for secret, status in ((world.tokens["outsider"], 404), (world.keys["b"], 404), (None, 401)):
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers=headers)
        assert refused.value.response.status_code == status


def test_a_hostile_replica_of_another_team_reaches_nothing(world: World, exchange: Path) -> None:
    """``hostile.ACTIONS`` as a replica's command (team B's deployment, no model) against a
    running job of team A and the server: every action blocked, A's job and files intact."""
    home = Path(world.server.extra_env["HOME"])  # this module's server, as the hostile job's
    pool = Pool(world.server, home, devices=Path("/dev"), as_root=False)  # tests see theirs
    member, outsider = world.clients["member"], world.clients["outsider"]
    victim = pool.submit(
        member, [sys.executable, "-c", VICTIM], resources={"gpus": 1}, workdir=str(exchange)
    )["id"]
    wait_for(lambda: "victim ready" in pool.log(victim), 30, "team A's job to run", 0.1)
    targets = _targets(pool, victim, exchange) | {"victim_user": "member"}
    body = {
        "name": "hostile-b",
        "command": hostile.command(targets),
        "env": {"HOSTILE_TOKEN": outsider.headers["Authorization"]},  # B's own
        "resources": {"gpus": 1},
    }
    made = outsider.post("/deployments", json=body)
    assert made.status_code == 201, made.text
    first = wait_for(lambda: _replica_job(world, "hostile-b"), 30, "its replica's job", 0.1)
    ended = pool.wait(first, FINAL, timeout=30)  # then restarted in its slot: a job of its own
    assert outsider.post("/deployments/hostile-b/stop").status_code == 200
    log = pool.log(first)
    assert ended["status"] == "succeeded", log

    found = hostile.outcomes(log)
    assert hostile.allowed(found) == {}, found
    listing = found["learn the other team's job from the node listing"]
    assert listing == "blocked: PermissionError", "it saw A's job listed, without its name"
    assert pool.job(victim)["status"] == "running"
    assert psutil.pid_exists(targets["victim_pid"]) and psutil.pid_exists(targets["server_pid"])
    assert "exit_code" not in pool.state(victim), "A's attempt state was not forged"
    (exchange / "release").touch()
    assert pool.wait(victim, FINAL)["status"] == "succeeded", pool.log(victim)
    assert "victim intact" in pool.log(victim)


def _replica_job(world: World, name: str) -> int | None:
    replicas = world.admin.get(f"/deployments/{name}").json()["replica_list"]
    return replicas[0]["job_id"] if replicas else None


def test_a_deployment_name_is_each_teams_own(world: World) -> None:
    """Team B deploys under the name team A serves: it is not told of A's (no 409), each
    team's /serve/NAME reaches its own replica, a member of both is asked which (409
    ambiguous_deployment naming each NAME@TEAM address) and reaches each at that address;
    nobody learns of a team they are not in through a team's address either."""
    member, outsider = world.clients["member"], world.clients["outsider"]
    first = member.post("/deployments", json={"name": "twin", "model": "probe-a", "command": PROBE})
    assert first.status_code == 201, first.text
    second = outsider.post(
        "/deployments", json={"name": "twin", "model": "probe-b", "command": PROBE}
    )
    assert second.status_code == 201, second.text  # not 409: A's name told B nothing
    assert second.json()["url"] == "/serve/twin/"
    again = outsider.post("/deployments", json={"name": "twin", "command": PROBE})
    assert again.status_code == 409 and "team others" in again.json()["error"]["message"]
    assert "owners" not in again.text  # a clash inside B's own team only
    both = _member_of_both(world)
    try:
        jobs = {team: _twin_job(world, team) for team in ("owners", "others")}
        for user, team in (("member", "owners"), ("outsider", "others")):
            answer = world.serve("twin", secret=world.tokens[user])
            assert answer.status_code == 200, answer.text
            assert answer.json()["model_dir"].endswith(f"/jobs/{jobs[team]}/model")
        refused = world.serve("twin", secret=both)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "ambiguous_deployment"
        assert (
            "/serve/twin@owners/" in error["message"] and "/serve/twin@others/" in error["message"]
        )
        for team in ("owners", "others"):
            answer = world.serve(f"twin@{team}", secret=both)
            assert answer.status_code == 200, answer.text
            assert answer.json()["model_dir"].endswith(f"/jobs/{jobs[team]}/model")
        assert world.serve("twin@owners", secret=world.tokens["outsider"]).status_code == 404
        assert outsider.get("/deployments/twin", params={"team": "owners"}).status_code == 404
        assert "owners" not in outsider.get("/deployments/twin").text
        api = _api(world, both)
        assert api.get("/deployments/twin").json()["error"]["code"] == "ambiguous_deployment"
        shown = api.get("/deployments/twin", params={"team": "others"}).json()
        assert (shown["team"], shown["url"]) == ("others", "/serve/twin@others/")
    finally:
        for team in ("owners", "others"):
            stopped = world.admin.post("/deployments/twin/stop", params={"team": team})
            assert stopped.status_code == 200, stopped.text


def _member_of_both(world: World) -> str:
    body = {"name": "both", "teams": ["owners", "others"], "role": "member"}
    assert world.admin.post("/users", json=body).status_code == 201
    return world.admin.post("/tokens", json={"user": "both", "name": "t"}).json()["token"]


def _api(world: World, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=f"{world.server.url}/api/v1", headers=headers)


def _twin_job(world: World, team: str) -> int:
    def ready() -> int | None:
        found = world.admin.get("/deployments/twin", params={"team": team}).json()
        return found["replica_list"][0]["job_id"] if found["ready"] >= 1 else None

    return wait_for(ready, 90, f"team {team}'s twin to be ready", 0.2)


def test_a_replica_sets_no_cookie_on_the_platforms_origin(world: World) -> None:
    """A deployment is an API: a replica's Set-Cookie would be stored on the platform's
    origin, then sent to every other team's workload behind it (or, by the hundred, evict
    the platform's own cookie from a browser's jar)."""
    for path in ("/set-cookies", "/cookies?n=200&c=theirs%3D1%3B%20Path%3D%2F"):
        answer = world.serve("echo-a", path, world.tokens["member"])
        assert answer.status_code == 200, answer.text
        assert answer.headers.get_list("set-cookie") == []


def test_a_name_encoded_in_the_path_reaches_its_deployment(world: World) -> None:
    """What follows /serve/NAME/ is cut after the name's own segment as it was sent, however
    the name was encoded (it was cut at the decoded name's length: a 500, HTTP and WebSocket)."""
    member = world.tokens["member"]
    said = world.serve("echo-%61", "/said?q=1", member)
    assert said.status_code == 200, said.text
    assert (said.json()["path"], said.json()["query"]) == ("/said", "q=1")
    slashed = world.serve("echo-a%2Fx", "/said", member)  # no name holds a '/'
    assert slashed.status_code == 404 and slashed.json()["error"]["code"] == "not_found"
    url = world.server.url.replace("http://", "ws://") + "/serve/echo-%61/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {member}"}) as ws:
        assert json.loads(ws.recv())["path"] == "/ws"


def test_a_replica_answering_a_websocket_with_a_page_is_a_502(world: World) -> None:
    """probe-a's replica answers a WebSocket's handshake as a plain GET: 200 and a body."""
    url = world.server.url.replace("http://", "ws://") + "/serve/probe-a/echo"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers={"Authorization": f"Bearer {world.keys['a']}"})
    answer = refused.value.response
    assert answer.status_code == 502, answer.body
    assert json.loads(answer.body)["error"]["code"] == "upstream_unavailable"


def test_deploy_key_create_prints_the_address_that_reaches_the_deployment(world: World) -> None:
    """Where two of the user's teams each deploy a name, 'gpupool deploy key create' prints
    the team's address (/serve/NAME@TEAM/, as 'deploy show' does), and the key works there;
    a name only one of the user's teams has keeps its plain address."""
    member, outsider = world.clients["member"], world.clients["outsider"]
    for api, model in ((member, "probe-a"), (outsider, "probe-b")):
        body = {"name": "pair", "model": model, "command": PROBE}
        assert api.post("/deployments", json=body).status_code == 201
    body = {"name": "keyholder", "teams": ["owners", "others"], "role": "member"}
    assert world.admin.post("/users", json=body).status_code == 201
    token = world.admin.post("/tokens", json={"user": "keyholder", "name": "t"}).json()["token"]
    cli = Cli(world.server.url, token)
    try:
        made = cli("deploy", "key", "create", "pair", "--team", "owners")
        assert made.returncode == 0, made.stderr
        printed = " ".join(made.stdout.split())
        assert "to /serve/pair@owners/ (it is not shown again)" in printed, made.stdout
        key = made.stdout.split()[0]
        wait_for(lambda: world.admin.get("/deployments/pair?team=owners").json()["ready"], 90, "")
        answer = world.serve("pair@owners", secret=key)
        assert answer.status_code == 200, answer.text
        own = Cli(world.server.url, world.tokens["member"])("deploy", "key", "create", "pair")
        assert own.returncode == 0, own.stderr
        assert "to /serve/pair/ (it is not shown again)" in " ".join(own.stdout.split())
    finally:
        for team in ("owners", "others"):
            stopped = world.admin.post("/deployments/pair/stop", params={"team": team})
            assert stopped.status_code == 200, stopped.text
