"""Code snapshots against another team: knowing a ref gives no access to its code, a hostile
archive is refused before anything is written, and a job cannot read another job's unpacked
code. A real server, as root (jobs under accounts of their own) and unprivileged."""

from __future__ import annotations

import sys
import tarfile

from tests.security.conftest import Pool
from tests.support.code import archive, ref, regular, special
from tests.support.waiting import wait_for

SECRET = b"weights = 'team a only'\n"
READ_EACH = """
import sys
for path in sys.argv[1:]:
    try:
        with open(path) as file:
            print("READ", path, file.read().strip(), flush=True)
    except OSError as error:
        print("blocked", type(error).__name__, flush=True)
"""


def test_another_teams_member_cannot_run_your_code_by_its_hash(pool: Pool) -> None:
    _, team_a = pool.member("team-a")
    _, team_b = pool.member("team-b")
    data = archive(regular("model.py", SECRET))
    assert team_a.put(f"/code/{ref(data)}", content=data).status_code == 200

    taken = team_b.post("/jobs", json={"command": ["cat", "model.py"], "code": ref(data)})
    unknown = "sha256:" + "1" * 64
    never = team_b.post("/jobs", json={"command": ["true"], "code": unknown})

    assert (taken.status_code, never.status_code) == (404, 404)
    assert taken.json()["error"]["code"] == never.json()["error"]["code"] == "code_not_found"
    assert taken.json()["error"]["message"].replace(ref(data), "R") == never.json()["error"][
        "message"
    ].replace(unknown, "R")
    assert team_b.get(f"/code/{ref(data)}").status_code == 404
    assert team_b.get("/jobs").json() == []


def test_a_hostile_archive_is_refused_and_nothing_lands_outside(pool: Pool) -> None:
    _, team_b = pool.member("team-b")
    store = pool.server.data_dir / "code" / "sha256"
    for member in (
        regular("../../../../tmp/gpupool-escaped.txt"),
        regular("/tmp/gpupool-escaped-abs.txt"),
        special("link", tarfile.SYMTYPE, "/etc/shadow"),
        special("hard", tarfile.LNKTYPE, "/etc/shadow"),
        special("null", tarfile.CHRTYPE),
    ):
        data = archive(regular("ok.py"), member)
        answer = team_b.put(f"/code/{ref(data)}", content=data)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "bad_code_archive"
        assert not (store / f"{ref(data).split(':')[1]}.tar.gz").exists()
    assert not list(pool.server.data_dir.parent.glob("**/gpupool-escaped*"))


def test_a_job_cannot_read_another_jobs_unpacked_code(pool: Pool) -> None:
    _, team_a = pool.member("team-a")
    _, team_b = pool.member("team-b")
    data = archive(regular("secret_model.py", SECRET))
    assert team_a.put(f"/code/{ref(data)}", content=data).status_code == 200
    victim = pool.submit(team_a, ["sh", "-c", "echo ready; sleep 120"], code=ref(data))
    wait_for(lambda: "ready" in pool.log(victim["id"]), 60, "team A's job to run")
    code_dir = pool.server.data_dir / "jobs" / str(victim["id"]) / "code"
    assert (code_dir / "secret_model.py").read_bytes() == SECRET  # it is there, on the host
    pid = pool.state(victim["id"])["pid"]
    paths = [
        str(code_dir / "secret_model.py"),
        f"/proc/{pid}/cwd/secret_model.py",
        f"/proc/{pid}/root{code_dir}/secret_model.py",
    ]

    attacker = pool.submit(team_b, [sys.executable, "-c", READ_EACH, *paths])
    done = pool.wait(attacker["id"], {"succeeded", "failed", "lost"})

    log = pool.log(attacker["id"])
    assert done["status"] == "succeeded", log
    assert "READ" not in log and log.count("blocked") == len(paths), log
    assert team_a.post(f"/jobs/{victim['id']}/cancel").status_code == 200
