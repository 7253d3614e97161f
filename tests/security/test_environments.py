"""Hostile use of Python environments: a member of another team lists, shows, uses and
removes a team's environment; a viewer makes or removes one; a job changes the environment it
runs in (or its build cache) to poison the next job; a user has the server or a node fetch from
an address of their choosing. Everything is refused (404 for what another team cannot see), and
the environment stays as it was built."""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support import waiting
from tests.support.platform import make_settings, refused, running_app, wait_job
from tests.support.wheels import wheelhouse

ENVS = "/api/v1/environments"
USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))
# a job of vision that tries to change its environment, its interpreter and uv's cache
TAMPER = (
    "import alpha, os, sys, glob\n"
    "targets = [alpha.__file__, os.path.join(sys.prefix, 'pyvenv.cfg'), sys.prefix + '/x']\n"
    "targets += glob.glob(os.path.join(os.path.dirname(sys.prefix), '.uv-cache'))\n"
    "for t in targets:\n"
    "    try:\n"
    "        open(t, 'a').write('poisoned')\n"
    "        print('WROTE', t)\n"
    "    except OSError as e:\n"
    "        print('refused', t, e.strerror)\n"
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    wheels = wheelhouse(tmp_path_factory.mktemp("wheels"))
    data = tmp_path_factory.mktemp("hostile-envs") / "data"
    settings = make_settings(data, env_index_url="", env_no_index=True, env_find_links=str(wheels))
    with running_app(settings) as (admin, platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        made = admin.post(
            ENVS, json={"name": "vision-env", "requirements": "beta\n"}, headers=headers["vic"]
        )
        assert made.status_code == 201, made.text
        yield {"client": admin, "platform": platform, "headers": headers, "env": made.json()}


def test_another_teams_member_cannot_list_show_use_or_remove_it(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]
    env = world["env"]

    assert client.get(ENVS, headers=ada).json() == []
    refused(client.get(f"{ENVS}/vision-env", headers=ada), 404, "not_found")
    by_id = f"{ENVS}/vision-env@{env['short_id']}"
    refused(client.get(by_id, headers=ada), 404, "not_found")
    refused(client.delete(f"{ENVS}/vision-env", headers=ada), 404, "not_found")
    for asked in ("vision-env", f"vision-env@{env['short_id']}", f"vision-env@{env['id']}"):
        job = {"command": ["python", "-c", "import beta"], "environment": asked}
        answer = client.post("/api/v1/jobs", json=job, headers=ada)
        refused(answer, 404, "not_found")
    assert client.get(f"{ENVS}/vision-env", headers=world["headers"]["vic"]).status_code == 200


def test_a_name_is_per_team_so_another_team_gets_its_own(world: dict) -> None:
    client, headers = world["client"], world["headers"]
    body = {"name": "vision-env", "requirements": "alpha<2\n"}
    mine = client.post(ENVS, json=body, headers=headers["ada"])
    assert mine.status_code == 201, mine.text
    assert (mine.json()["team"], mine.json()["packages"]) == ("audio", ["alpha==1.0"])
    vision = client.get(f"{ENVS}/vision-env", headers=headers["vic"]).json()
    assert (vision["team"], vision["latest"]["id"]) == ("vision", world["env"]["id"])
    refused(client.get(f"{ENVS}/vision-env"), 422, "ambiguous_environment")  # the admin


def test_a_viewer_reads_but_cannot_make_or_remove(world: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    assert client.get(f"{ENVS}/vision-env", headers=val).status_code == 200
    body = {"name": "viewer-env", "requirements": "alpha\n"}
    refused(client.post(ENVS, json=body, headers=val), 403, "forbidden")
    refused(client.delete(f"{ENVS}/vision-env", headers=val), 403, "forbidden")
    prefix = {"name": "site", "path": "/usr"}
    refused(client.post(f"{ENVS}/prefixes", json=prefix, headers=val), 403, "forbidden")
    refused(
        client.post(f"{ENVS}/prefixes", json=prefix, headers=world["headers"]["vic"]),
        403,
        "forbidden",
    )


@pytest.mark.parametrize(
    "requirements",
    [
        "alpha @ http://127.0.0.1:1/alpha-2.0-py3-none-any.whl\n",
        "alpha @ file:///etc/shadow\n",
        "--extra-index-url http://127.0.0.1:1/simple\nalpha\n",
        "-i http://127.0.0.1:1/simple\nalpha\n",
        "--find-links /etc\nalpha\n",
        "-r /etc/passwd\n",
        "-e /tmp/somewhere\n",
        "git+https://127.0.0.1:1/repo.git\n",
    ],
)
def test_no_address_or_path_of_a_users_choosing_is_fetched(world: dict, requirements: str) -> None:
    client, vic = world["client"], world["headers"]["vic"]
    answer = client.post(ENVS, json={"name": "ssrf", "requirements": requirements}, headers=vic)
    refused(answer, 422, "invalid_environment")
    assert "root:" not in answer.text


def test_a_job_cannot_change_its_environment_for_the_next_job(world: dict) -> None:
    client, vic = world["client"], world["headers"]["vic"]
    platform = world["platform"]
    job = {"command": ["python", "-c", TAMPER], "environment": "vision-env"}
    first = client.post("/api/v1/jobs", json=job, headers=vic).json()["id"]
    assert wait_job(client, first, timeout=120)["status"] == "succeeded"
    log = client.get(f"/api/v1/jobs/{first}/logs", headers=vic).text
    assert "WROTE" not in log and log.count("refused") >= 3, log

    env_dir = platform.settings.envs_dir / world["env"]["id"].split(":")[1]
    for path in env_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert b"poisoned" not in path.read_bytes(), path
            assert not path.stat().st_mode & 0o222, path  # no write bit for anyone
    cache = platform.settings.envs_dir / ".uv-cache"
    assert cache.stat().st_mode & 0o777 == 0o700  # only the builder's account enters it


def test_another_team_cannot_see_stop_or_join_a_teams_build_job(world: dict) -> None:
    """Two teams with the same lock share one environment on the node (it is the same bytes),
    but each team's GPU job waits for a build job of its own team: another team's member
    cannot see, stop or learn of vision's."""
    client, platform = world["client"], world["platform"]
    vic, ada = world["headers"]["vic"], world["headers"]["ada"]
    body = {"requirements": "alpha==1.0\n"}
    vision = client.post(ENVS, json={"name": "same-lock", **body}, headers=vic).json()
    audio = client.post(ENVS, json={"name": "same-lock", **body}, headers=ada).json()
    assert vision["id"] == audio["id"]
    locks = platform.settings.envs_dir / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    held = os.open(locks / vision["id"].split(":")[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # both builds wait here: both jobs wait for them
    try:
        job = {"command": ["python", "-c", "import alpha"], "resources": {"gpus": 1}}
        job["environment"] = "same-lock"
        vics = client.post("/api/v1/jobs", json=job, headers=vic).json()["id"]
        adas = client.post("/api/v1/jobs", json=job, headers=ada).json()["id"]
        waiting = [_waits_for_build(client, job_id) for job_id in (vics, adas)]
        vision_build, audio_build = (int(re.findall(r"job (\d+)", m)[0]) for m in waiting)
        assert vision_build != audio_build  # ada's job waits for a build of her own team
        mine = client.get(f"/api/v1/jobs/{audio_build}", headers=ada).json()
        assert (mine["team"], mine["user"], mine["kind"]) == ("audio", "ada", "envbuild")
        refused(client.get(f"/api/v1/jobs/{vision_build}", headers=ada), 404, "not_found")
        stop = client.post(f"/api/v1/jobs/{vision_build}/cancel", headers=ada)
        refused(stop, 404, "not_found")
        listed = client.get("/api/v1/jobs", headers=ada).json()
        assert vision_build not in {j["id"] for j in listed}
        why = client.get(f"/api/v1/jobs/{adas}/why", headers=ada).json()
        assert f"job {audio_build} (" in why["summary"]
        assert f"job {vision_build} " not in why["summary"] + why["message"]
    finally:
        os.close(held)
    for job_id in (vics, adas, vision_build, audio_build):
        assert wait_job(client, job_id, timeout=120)["status"] == "succeeded", job_id


def _waits_for_build(client: TestClient, job_id: int) -> str:
    def check() -> str | None:
        job = client.get(f"/api/v1/jobs/{job_id}").json()
        return job["message"] if job["reason"] == "EnvBuilding" else None

    return waiting.wait_for(check, 60.0, f"job {job_id} to wait for a build")


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}
