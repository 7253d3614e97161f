"""A hostile job of team B against team A's running job and the server: every action of
``hostile.ACTIONS`` must fail, while A's job runs on undisturbed, its files intact."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import psutil

from tests.security import hostile
from tests.security.conftest import Pool
from tests.support.server import free_port
from tests.support.waiting import wait_for

# Team A's job: writes a checkpoint, says so, and waits for its release file; then checks
# that nobody touched its checkpoint or working directory, and exits 0 only if so.
VICTIM = """
import os, socket, sys, threading, time
ckpt = os.path.join(os.environ["GPUPOOL_CHECKPOINT_DIR"], "model.ckpt")
open(ckpt, "w").write("weights-of-team-a")
if os.environ.get("VICTIM_PORT"):  # a port it serves on its loopback (a kernel's, a model's)
    server = socket.create_server(("127.0.0.1", int(os.environ["VICTIM_PORT"])))
    def answer():
        while True:
            conn, _ = server.accept()
            conn.sendall(b"secret-of-team-a")
            conn.close()
    threading.Thread(target=answer, daemon=True).start()
print("victim ready", flush=True)
while not os.path.exists("release"):
    time.sleep(0.05)
intact = open(ckpt).read() == "weights-of-team-a"
clean = sorted(os.listdir(os.environ["GPUPOOL_CHECKPOINT_DIR"])) == ["model.ckpt"]
clean = clean and not os.path.exists("evil")
print("victim intact" if intact and clean else "victim TAMPERED", flush=True)
sys.exit(0 if intact and clean else 1)
"""


def test_a_hostile_job_of_another_team_reaches_nothing(pool: Pool, exchange: Path) -> None:
    victim_user, team_a = pool.member("team-a")
    _, team_b = pool.member("team-b")
    port = free_port()
    victim = pool.submit(
        team_a,
        [sys.executable, "-c", VICTIM],
        resources={"gpus": 1},
        workdir=str(exchange),
        env={"VICTIM_PORT": str(port)},
    )
    wait_for(lambda: "victim ready" in pool.log(victim["id"]), 60, "team A's job to run")
    targets = _targets(pool, victim["id"], exchange) | {"victim_user": victim_user}
    node_service = socket.create_server(("127.0.0.1", 0))  # another listener of the node's
    targets |= {"victim_port": port, "node_port": node_service.getsockname()[1]}

    own_token = {"HOSTILE_TOKEN": team_b.headers["Authorization"]}  # B's own, not on argv
    attacker = pool.submit(team_b, hostile.command(targets), resources={"gpus": 1}, env=own_token)
    with node_service:
        done = pool.wait(attacker["id"], {"succeeded", "failed", "lost"})
    assert done["status"] == "succeeded", pool.log(attacker["id"])
    found = hostile.outcomes(pool.log(attacker["id"]))

    assert hostile.allowed(found) == {}, found
    listing = found["learn the other team's job from the node listing"]
    assert listing == "blocked: PermissionError", "it saw A's job listed, without its name"
    server_uid = psutil.Process(targets["server_pid"]).uids().real
    job_uid = hostile.uid(pool.log(attacker["id"]))
    if pool.as_root:  # its own account: never root, never the server's
        assert server_uid == 0 and job_uid not in (0, server_uid)
    else:  # the server's own account, in a user namespace
        assert server_uid != 0 and job_uid == server_uid
    assert pool.job(victim["id"])["status"] == "running"
    # its 40 bad tokens lock nobody else out: A's member and the admin still get in
    assert team_a.get("/jobs").status_code == 200
    assert pool.admin.get("/nodes").status_code == 200
    assert psutil.pid_exists(targets["victim_pid"]) and psutil.pid_exists(targets["server_pid"])
    assert "exit_code" not in pool.state(victim["id"]), "A's attempt state was not forged"
    (exchange / "release").touch()
    ended = pool.wait(victim["id"], {"succeeded", "failed", "lost"})
    assert ended["status"] == "succeeded", pool.log(victim["id"])
    assert "victim intact" in pool.log(victim["id"])


def test_a_workdir_into_another_teams_directories_is_refused(pool: Pool, exchange: Path) -> None:
    _, team_a = pool.member("team-a")
    _, team_b = pool.member("team-b")
    victim = pool.submit(team_a, ["sleep", "60"], workdir=str(exchange))
    checkpoints = pool.server.data_dir / "jobs" / str(victim["id"]) / "checkpoints"
    for workdir in (
        str(checkpoints),
        f"../../../{victim['id']}/checkpoints",
        str(pool.server.data_dir),
    ):
        answer = team_b.post("/jobs", json={"command": ["ls"], "workdir": workdir})
        assert answer.status_code == 422, (workdir, answer.text)
        assert answer.json()["error"]["code"] == "workdir_not_allowed"
    assert team_a.post(f"/jobs/{victim['id']}/cancel").status_code == 200


def _targets(pool: Pool, job_id: int, workdir: Path) -> dict[str, object]:
    """What the attacker is assumed to know of team A's job and of the server."""
    attempt = pool.attempt_dir(job_id)
    state = wait_for(lambda: pool.state(job_id).get("sandbox"), 30, "A's sandbox to be recorded")
    namespace = state["pid_namespace"]
    from gpupool.runner.sandbox import members

    workload = next(p for p in members(namespace) if p != state["init_pid"])
    return {
        "db": str(pool.server.data_dir / "gpupool.db"),
        "data_dir": str(pool.server.data_dir),
        "jobs_dir": str(pool.server.data_dir / "jobs"),
        "victim_log": str(attempt / "output.log"),
        "victim_state": str(attempt / "state.json"),
        "victim_stop": str(attempt / "stop.json"),
        "victim_checkpoints": str(pool.server.data_dir / "jobs" / str(job_id) / "checkpoints"),
        "victim_workdir": str(workdir),
        "victim_id": job_id,
        "api": f"{pool.server.url}/api/v1",
        "victim_pid": workload,
        "victim_runner_pid": pool.state(job_id)["runner_pid"],
        "server_pid": pool.server_pid(),
        "admin_config": str(pool.admin_config),
        "gpus_given": 1,
        "uid": os.getuid(),
    }
