"""Training metrics against hostile users and jobs: another team's member reads nothing of a
job's metrics; a job of another team cannot write into them, a job cannot forge its GPU
samples, and junk or huge lines break nothing (the records the server reads are the runner's)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from tests.security.conftest import Pool
from tests.support.waiting import wait_for

pytestmark = pytest.mark.parametrize("pool", ["root"], indirect=True)  # one server: root's

VICTIM = """
import os, time
from gpupool import metrics
for step in range(5):
    metrics.log(step=step, loss=1.0 - step / 10)
print("victim ready", flush=True)
while not os.path.exists("release"):
    time.sleep(0.05)
"""

# Each attempt prints "ALLOWED: <what>" when it worked; the test wants none.
HOSTILE = """
import json, os, sys
victim_file, victim_records = sys.argv[1], sys.argv[2]
own = os.environ["GPUPOOL_METRICS_FILE"]
def attempt(what, action):
    try:
        action()
        print("ALLOWED:", what, flush=True)
    except OSError as error:
        print("blocked:", what, type(error).__name__, flush=True)
line = json.dumps({"step": 99, "values": {"loss": 666}}) + "\\n"
attempt("append to the other job's metrics file", lambda: open(victim_file, "a").write(line))
attempt("append to the other job's records", lambda: open(victim_records, "a").write(
    json.dumps(["loss", 99, 1.0, 666.0]) + "\\n"))
own_records = os.path.join(
    sys.argv[3], os.environ["GPUPOOL_JOB_ID"], "attempts", os.environ["GPUPOOL_ATTEMPT"],
    "metrics.jsonl")
attempt("write its own attempt's records", lambda: open(own_records, "a").write("[]\\n"))
with open(own, "ab") as f:
    f.write(json.dumps({"values": {"gpu.0.utilization": 100}}).encode() + b"\\n")  # forged sample
    f.write(b"\\x00\\xff junk \\xfe\\n")
    f.write(b"[" * 3_000_000 + b"\\n")  # one huge line
    f.write(b'{"step": 1, "values": {"ok": 1}}\\n')
    f.write(b"x" * 200_000)  # a last line that never ends
print("hostile done", flush=True)
"""


def test_a_jobs_metrics_stay_its_own(pool: Pool, exchange: Path) -> None:
    _, team_a = pool.member("team-a")
    team_b_name, team_b = pool.member("team-b")
    victim = pool.submit(team_a, [sys.executable, "-c", VICTIM], workdir=str(exchange))
    job_id = victim["id"]
    wait_for(
        lambda: "victim ready" in pool.log(job_id),
        60,
        "team A's job to run",
        about=lambda: (pool.job(job_id), pool.log(job_id)),
    )
    seen = wait_for(lambda: _series(team_a, job_id), 30, "A's points kept")
    assert seen["loss"] == [1.0, 0.9, 0.8, 0.7, 0.6]
    for path in (f"/jobs/{job_id}/metrics", f"/jobs/{job_id}/metrics/summary"):
        answer = team_b.get(path)
        assert answer.status_code == 404, answer.text
        assert "loss" not in answer.text
    scrape = team_b.get(f"{pool.server.url}/metrics")
    assert scrape.status_code == 403
    compared = _page(pool, team_b_name, team_b, f"/jobs/compare?ids={job_id}")
    assert f"No job you can see has the id {job_id}" in compared and "victim ready" not in compared
    assert "VICTIM" not in compared and "metrics.log" not in compared

    victim_file = Path(pool.server.data_dir, "jobs", str(job_id), "outputs", ".gpupool")
    records = pool.attempt_dir(job_id) / "metrics.jsonl"
    command = [sys.executable, "-c", HOSTILE, str(victim_file / "metrics-1.jsonl")]
    jobs_dir = pool.server.data_dir / "jobs"
    attacker = pool.submit(team_b, [*command, str(records), str(jobs_dir)])
    done = pool.wait(attacker["id"], {"succeeded", "failed", "lost"})
    log = pool.log(attacker["id"])
    assert done["status"] == "succeeded", log
    assert "ALLOWED" not in log and log.count("blocked:") == 3, log

    (exchange / "release").touch()
    pool.wait(job_id, {"succeeded"})
    after = wait_for(lambda: _series(team_a, job_id, complete=True), 30, "A's last points")
    assert after == seen, "A's metrics are as A reported them"
    own = wait_for(lambda: _series(team_b, attacker["id"], complete=True), 30, "B's points")
    assert own == {"ok": [1.0]}, "no forged GPU sample, and the valid line got through"
    assert "names starting with gpu. are the runner's own" in log
    assert "over 65536 bytes" in log and "not JSON" in log


def _page(pool: Pool, user: str, api: httpx.Client, path: str) -> str:
    """A web page as ``user`` sees it, signed in with their token as the password."""
    token = api.headers["Authorization"].removeprefix("Bearer ")
    with httpx.Client(base_url=pool.server.url, timeout=30) as browser:
        signed = browser.post("/api/v1/session", json={"user": user, "password": token})
        assert signed.status_code == 200, signed.text
        page = browser.get(path)
        assert page.status_code == 200
        return page.text


def _series(client, job_id: int, complete: bool = False) -> dict[str, list[float]] | None:  # noqa: ANN001
    answer = client.get(f"/jobs/{job_id}/metrics").json()
    if complete and not answer["complete"]:
        return None
    return {s["name"]: s["values"] for s in answer["series"]} or None
