"""Issue 23's lock-out, from inside jobs: a job reaches the platform's API on its own
loopback, relayed by its runner's bridge to the server's Unix socket. Its failures are
counted against that job ("job 12 (ann)"), not against one source that every job shares:
a job of another team (and the admin's CLI, and the sprayer's own valid token) is never
refused for them, and the throttle's log line names the job that was throttled."""

from __future__ import annotations

import json
import secrets
import sys

from tests.security.conftest import Pool
from tests.support.cli import Cli

FINAL = {"succeeded", "failed", "cancelled", "lost"}
PASSWORD = "a-long-password-of-the-test"

# Calls the API on the job's own loopback: 40 unknown tokens, 40 wrong passwords for names
# of nobody, then (NEIGHBOUR) one unknown token and a sign-in with its own password, and
# its own valid token; prints what each was answered.
CALLS = """
import json, os, urllib.error, urllib.request
API = os.environ["API"]
def call(path, token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(API + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
found = {}
if os.environ.get("SPRAY"):
    found["tokens"] = [call("/jobs", f"gpt_bad{i}")[0] for i in range(40)]
    wrong = [{"user": f"nobody{i}", "password": "wrong"} for i in range(40)]
    found["passwords"] = [call("/session", body=body)[0] for body in wrong]
    found["refused_says"] = call("/jobs", "gpt_bad40")[1]
else:
    found["tokens"] = [call("/jobs", "gpt_bad-of-the-neighbour")[0]]
    body = {"user": os.environ["ME"], "password": os.environ["PASSWORD"]}
    found["passwords"] = [call("/session", body=body)[0]]
found["own"] = call("/whoami", os.environ["TOKEN"])[0]
print("CALLS=" + json.dumps(found), flush=True)
"""


def test_a_jobs_failures_count_against_that_job_alone(pool: Pool) -> None:
    sprayer, sprayer_token = _user(pool, "team-b")
    neighbour, neighbour_token = _user(pool, "team-a")
    api = f"{pool.server.url}/api/v1"  # 127.0.0.1:PORT, which each job has on its loopback

    spray = _run(pool, sprayer_token, {"API": api, "SPRAY": "1", "TOKEN": sprayer_token})
    assert spray["tokens"][0] == 401 and spray["tokens"][-1] == 429, spray
    assert spray["passwords"][0] == 401 and spray["passwords"][-1] == 429, spray
    assert spray["own"] == 200, "its own valid token is never refused"
    env = {"API": api, "ME": neighbour, "PASSWORD": PASSWORD, "TOKEN": neighbour_token}
    calm = _run(pool, neighbour_token, env)
    assert calm["tokens"] == [401], "another job's unknown token: 401, not 429"
    assert calm["passwords"] == [200], "another job signs in"
    assert calm["own"] == 200
    admin = Cli(pool.server.url, pool.server.token)("whoami")
    assert admin.returncode == 0 and "admin" in admin.stdout, admin.stderr

    sprayed = _job_of(pool, sprayer)
    log = pool.server.output()
    assert f"job {sprayed} ({sprayer})" in log, log[-3000:]
    assert "from unknown" not in log


def _user(pool: Pool, team: str) -> tuple[str, str]:
    if team not in {t["name"] for t in pool.admin.get("/teams").json()}:
        assert pool.admin.post("/teams", json={"name": team}).status_code == 201
    name = f"{team}-{secrets.token_hex(3)}"
    body = {"name": name, "teams": [team], "password": PASSWORD}
    assert pool.admin.post("/users", json=body).status_code == 201
    pool.accounts.append(f"gp-{name}")
    token = pool.admin.post("/tokens", json={"user": name, "name": "t"}).json()["token"]
    return name, token


def _run(pool: Pool, token: str, env: dict[str, str]) -> dict:
    job = pool.submit(pool.client(token), [sys.executable, "-c", CALLS], env=env)
    done = pool.wait(job["id"], FINAL, timeout=120)
    log = pool.log(job["id"])
    assert done["status"] == "succeeded", log
    line = next(x for x in log.splitlines() if x.startswith("CALLS="))
    return json.loads(line.removeprefix("CALLS="))


def _job_of(pool: Pool, user: str) -> int:
    return next(j["id"] for j in pool.admin.get("/jobs", params={"user": user}).json())
