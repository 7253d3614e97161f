"""Deployments from the real CLI against a real server: a tiny PyTorch model trained by a job
(examples/train_tiny.py), registered, deployed with 2 replicas of the built-in server; it
answers through /serve, and a process of the node that calls a replica's port directly gets
403 (the replica's token, never shown by the API, is only the proxy's); a replica killed with
SIGKILL is restarted while the endpoint keeps answering; a rolling update to version 2 under
a stream of requests fails none and ends on version 2; scale 2 -> 1 -> 2; stop."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import REPO
from tests.support.cli import FINAL, Cli, hold, wait_status
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for
from tests.support.workloads import node_listeners, runner_client

pytest.importorskip("torch")
ROWS = {"inputs": [[0.1] * 8, [0.5] * 8]}
MAX_REQUESTS = 200  # each loop below is bounded in count (and in time by wait_for)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"GPUPOOL_DEPLOY_HEALTH_INTERVAL_SECONDS": "0.5", "GPUPOOL_DEPLOY_DRAIN_SECONDS": "0.5"}
    process = ServerProcess(tmp_path_factory.mktemp("deploy") / "data", env=env).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def api(pool: ServerProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {pool.token}"}
    with httpx.Client(base_url=pool.url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def versions(pool: ServerProcess, api: httpx.Client) -> Iterator[dict[int, str]]:
    """Two versions of the model 'tiny' (two seeds): version -> its model.pt's SHA-256."""
    workdir = Path(tempfile.mkdtemp(prefix="gpupool-deploy-", dir="/tmp"))
    workdir.chmod(0o1777)
    shutil.copy(REPO / "examples" / "train_tiny.py", workdir / "train_tiny.py")
    cli = Cli(pool.url, pool.token)
    runs = []
    for seed in ("1", "2"):
        command = [sys.executable, "train_tiny.py", "--steps", "3", "--seed", seed]
        runs.append(api.post("/api/v1/jobs", json={"command": command, "workdir": str(workdir)}))
    found = {}
    for number, run in enumerate(runs, start=1):
        job_id = run.json()["id"]
        job = wait_for(lambda j=job_id: _ended(api, j), 120, f"training job {job_id}", 0.2)
        assert job["status"] == "succeeded", job
        version = cli.json("model", "register", "tiny", "--from-job", str(job_id))
        assert version["version"] == number
        found[number] = next(f["sha256"] for f in version["files"] if f["path"] == "model.pt")
    yield found
    shutil.rmtree(workdir, ignore_errors=True)


def test_deploy_survive_a_kill_roll_scale_and_stop(
    pool: ServerProcess, api: httpx.Client, versions: dict[int, str]
) -> None:
    cli = Cli(pool.url, pool.token)
    said = cli.ok("deploy", "tiny:1", "--replicas", "2")
    assert "served at /serve/tiny/" in said
    deployed = wait_for(lambda: _ready(api, 2), 90, "2 ready replicas", 0.2)
    answer = api.post("/serve/tiny/predict", json=ROWS)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["outputs"]) == 2 and answer.json()["model"]["sha256"] == versions[1]
    bad = api.post("/serve/tiny/predict", json={"rows": []})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_inputs"
    _direct_calls_are_refused(api, deployed, pool.data_dir)

    victim = deployed["replica_list"][0]
    killed = [psutil.Process(pid) for pid, _ in _serving(victim["job_id"])]
    for process in killed:
        process.send_signal(signal.SIGKILL)
    psutil.wait_procs(killed, timeout=30)  # its port closed: a request now is refused there
    answers = _while(api, lambda: _restarted(api, victim["id"]))
    assert set(answers) == {versions[1]}, "every request was answered, by version 1"
    shown = cli.json("deploy", "show", "tiny")
    assert [r["restarts"] for r in shown["replica_list"] if r["id"] == victim["id"]] == [1]
    assert any(e["reason"] == "ReplicaExited" for e in shown["events"])
    assert "ReplicaExited" in cli.ok("deploy", "show", "tiny")

    cli.ok("deploy", "update", "tiny:2")
    answers = _while(api, lambda: _rolled(api, 2))
    assert versions[1] in answers and answers[-1] == versions[2], "no request failed"
    assert api.post("/serve/tiny/predict", json=ROWS).json()["model"]["sha256"] == versions[2]

    cli.ok("deploy", "scale", "tiny", "1")
    wait_for(lambda: _live(api) == 1 or None, 60, "one replica", 0.2)
    cli.ok("deploy", "scale", "tiny", "2")
    wait_for(lambda: _ready(api, 2), 60, "two replicas again", 0.2)
    assert "tiny" in cli.ok("deploy", "ls") and "2/2" in cli.ok("deploy", "ls")

    _pages_show_it(pool)

    cli.ok("deploy", "stop", "tiny")
    assert api.post("/serve/tiny/predict", json=ROWS).status_code == 404
    assert cli.json("deploy", "ls") == []


def _direct_calls_are_refused(api: httpx.Client, deployed: dict, data_dir: Path) -> None:
    """A process of the node that finds a replica's port (here, from its environment) finds
    no listener of the replica there: the port is on the replica's own loopback. Behind the
    runner's socket (root's and the server's alone) the built-in server still refuses a call
    without its token, health included: /serve works, with a forged token header too (dropped); the
    token is in no answer of the API about the deployment or its job."""
    job_id = deployed["replica_list"][0]["job_id"]
    serving = _serving(job_id)
    env = serving[0][1]
    token, url = env["GPUPOOL_REPLICA_TOKEN"], f"http://{env['GPUPOOL_LISTEN_HOST']}:{env['PORT']}"
    # none of its processes listens on the node's loopback (where another test's job may
    # hold that port: asking the port there would prove nothing)
    assert node_listeners({pid for pid, _env in serving}, int(env["PORT"])) == []
    forged = {"X-Gpupool-Replica-Token": "forged"}
    with runner_client(data_dir, job_id) as through_runner:
        for headers in ({}, forged):
            assert through_runner.get(f"{url}/health", headers=headers).status_code == 403
            answer = through_runner.post(f"{url}/predict", json=ROWS, headers=headers)
            assert answer.status_code == 403
    assert api.post("/serve/tiny/predict", json=ROWS, headers=forged).status_code == 200
    shown = [api.get(p).text for p in ("/api/v1/deployments/tiny", f"/api/v1/jobs/{job_id}")]
    shown.append(api.get("/api/v1/jobs").text)
    assert token and all(token not in text for text in shown)


def _pages_show_it(pool: ServerProcess) -> None:
    """The deployments list and the deployment's page, as a signed-in browser gets them."""
    with httpx.Client(base_url=pool.url, timeout=30) as browser:
        signed = browser.post("/api/v1/session", json={"user": "admin", "password": pool.token})
        assert signed.status_code == 200
        listed = browser.get("/deployments")
        page = browser.get("/deployments/tiny")
    assert listed.status_code == 200 and "/deployments/tiny" in listed.text
    assert page.status_code == 200 and 'id="try-form"' in page.text
    assert page.text.count('data-replica="') >= 2 and "tiny:2" in page.text


def _while(api: httpx.Client, done) -> list[str]:  # noqa: ANN001 - a check of wait_for's
    """Requests one after another until ``done``: the model file of each answer, in order.
    Any request that fails fails the test."""
    answers: list[str] = []

    def ask() -> bool | None:
        answer = api.post("/serve/tiny/predict", json=ROWS)
        assert answer.status_code == 200, f"request {len(answers) + 1}: {answer.text}"
        answers.append(answer.json()["model"]["sha256"])
        assert len(answers) <= MAX_REQUESTS, "not done within the bounded requests"
        return done() or None

    wait_for(ask, 90, "the deployment to settle under requests", 0.05)
    return answers


def _ended(api: httpx.Client, job_id: int) -> dict | None:
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    return job if job["status"] in FINAL else None


def _deployment(api: httpx.Client) -> dict:
    return api.get("/api/v1/deployments/tiny").json()


def _ready(api: httpx.Client, count: int) -> dict | None:
    found = _deployment(api)
    return found if found["ready"] == count and found["state"] == "running" else None


def _live(api: httpx.Client) -> int:
    replicas = _deployment(api)["replica_list"]
    return len([r for r in replicas if r["state"] not in ("draining", "stopped")])


def _restarted(api: httpx.Client, replica_id: int) -> bool:
    found = _deployment(api)
    again = [r for r in found["replica_list"] if r["id"] == replica_id and r["restarts"] == 1]
    return bool(again) and again[0]["state"] == "ready" and found["ready"] == 2


def test_deploy_show_says_why_a_replica_waits(
    tmp_path: Path, exchange: Path, release: Path
) -> None:
    """A replica whose job waits on CPUs (another job holds the node's 2) says so in
    'deploy show' and its JSON, with the scheduler's reason and message ('gpupool why');
    'gpupool nodes' names who holds the CPUs (another team's job, to another team)."""
    env = {"GPUPOOL_DECLARED_CPUS": "2", "GPUPOOL_DEPLOY_HEALTH_INTERVAL_SECONDS": "0.5"}
    server = ServerProcess(tmp_path / "data", env=env).start()
    try:
        cli = Cli(server.url, server.token)
        holder = cli.submit("--cpus", "2", "--workdir", str(exchange), *hold(release))
        wait_status(cli, holder, {"running"})
        cli.ok("deploy", "waits", "--no-model", "--cpus", "1", "--", "sleep", "600")
        shown = wait_for(lambda: _waiting(cli, "waits"), 60, "the replica's reason", 0.2)
        replica = shown["replica_list"][0]
        assert replica["state"] == "pending"
        assert replica["waiting_message"].startswith("needs 1 CPU; the most free")
        said = cli.ok("deploy", "show", "waits")
        assert "pending (InsufficientCpu)" in said
        assert f"replica {replica['id']} waits: InsufficientCpu: needs 1 CPU" in said
        assert f"(gpupool why {replica['job_id']})" in said
        assert f"cpus held by: job {holder} (" in cli.ok("nodes")  # who it waits for
        seen = Cli(server.url, _outsider(server)).ok("nodes")
        assert "cpus held by: another team's job (2 CPUs)" in seen and f"job {holder}" not in seen
        cli.ok("deploy", "stop", "waits")
    finally:
        release.touch()
        server.stop()


def _outsider(server: ServerProcess) -> str:
    """The token of a member of another team than the admin's."""
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=f"{server.url}/api/v1", headers=headers) as admin:
        assert admin.post("/teams", json={"name": "others"}).status_code == 201
        body = {"name": "outsider", "teams": ["others"], "role": "member"}
        assert admin.post("/users", json=body).status_code == 201
        return admin.post("/tokens", json={"user": "outsider", "name": "t"}).json()["token"]


def _waiting(cli: Cli, name: str) -> dict | None:
    found = cli.json("deploy", "show", name)
    replicas = found["replica_list"]
    return found if replicas and replicas[0]["waiting_reason"] == "InsufficientCpu" else None


def _rolled(api: httpx.Client, version: int) -> bool:
    found = _deployment(api)
    return found["state"] == "running" and found["version"] == version and found["ready"] == 2


def _serving(job_id: int) -> list[tuple[int, dict[str, str]]]:
    """The built-in server's processes of the replica job ``job_id`` (found by their
    environment), each with that environment."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gpupool.serving" in command and f"GPUPOOL_JOB_ID={job_id}".encode() in environ:
            pairs = (item.decode(errors="replace").partition("=") for item in environ if item)
            found.append((int(entry), {name: value for name, _, value in pairs}))
    assert found, f"no built-in server of job {job_id}"
    return found
