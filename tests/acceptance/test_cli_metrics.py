"""``gpupool metrics`` against a real server, and ingestion across a kill -9 of the server:
every point kept exactly once."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Cli, refused, wait_for
from tests.support.server import ServerProcess

STEPS = 25
TRAIN = (
    "from gpupool import metrics\n"
    f"for step in range({STEPS}):\n"
    "    metrics.log(step=step, loss=100.0 - step, acc=step / 100)\n"
)
# a burst of points, a wait for the release file (the test kills the server meanwhile), another
BURST = 20_000
BURSTY = (
    "import json, os, sys, time\n"
    "def burst(first):\n"
    "    with open(os.environ['GPUPOOL_METRICS_FILE'], 'a') as f:\n"
    f"        for step in range(first, first + {BURST}):\n"
    "            f.write(json.dumps({'step': step, 'values': {'x': step}}) + '\\n')\n"
    "burst(0)\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    f"burst({BURST})\n"
)


@pytest.fixture(scope="module")
def trained(pool: ServerProcess) -> int:
    cli = Cli(pool.url, pool.token)
    job_id = cli.submit("--", sys.executable, "-c", TRAIN)
    wait_for(lambda: _complete(pool, job_id), 60, f"job {job_id}'s metrics")
    return job_id


def _complete(server: ServerProcess, job_id: int) -> bool:
    headers = {"Authorization": f"Bearer {server.token}"}
    answer = httpx.get(f"{server.url}/api/v1/jobs/{job_id}/metrics", headers=headers, timeout=30)
    return answer.json()["complete"]


def test_the_table_shows_each_metric_once(admin: Cli, trained: int) -> None:
    lines = admin.ok("metrics", str(trained)).splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line.strip()}
    assert rows["loss"] == ["76", "76", "100", str(STEPS)]
    assert rows["acc"] == ["0.24", "0", "0.24", str(STEPS)]


def test_json_and_csv_give_every_point(admin: Cli, trained: int) -> None:
    found = admin.json("metrics", str(trained), "--name", "loss")
    [loss] = found["series"]
    assert loss["name"] == "loss" and loss["attempt"] == 1
    assert loss["steps"] == list(range(STEPS))
    rows = list(csv.DictReader(io.StringIO(admin.ok("metrics", str(trained), "-o", "csv"))))
    assert len(rows) == 2 * STEPS
    assert rows[0].keys() == {"attempt", "name", "step", "time", "value"}
    assert {(r["name"], r["step"], r["value"]) for r in rows} >= {("acc", "3", "0.03")}


def test_a_job_without_metrics_says_how_to_report_them(admin: Cli) -> None:
    job_id = admin.submit("--", "true")
    assert "gpupool.metrics.log(step=..." in admin.ok("metrics", str(job_id))


def test_an_unknown_job_is_refused(admin: Cli) -> None:
    assert refused(admin("metrics", "987654"), "not_found")


def test_a_kill_9_of_the_server_neither_loses_nor_repeats_a_point(
    pool: ServerProcess, exchange: Path
) -> None:
    """Last in this module: it kills the module's server, then starts it again."""
    release = exchange / "release"
    cli = Cli(pool.url, pool.token)
    command = [sys.executable, "-c", BURSTY, str(release)]
    job_id = cli.submit("--workdir", str(exchange), "--", *command)
    wait_for(lambda: _points(pool, job_id) > 0, 60, "the first points kept")
    pool.kill9()
    pool.start()
    release.touch()
    wait_for(lambda: _complete(pool, job_id), 90, "every point kept after the restart")
    [series] = cli.json("metrics", str(job_id))["series"]
    assert series["steps"] == list(range(2 * BURST))


def _points(server: ServerProcess, job_id: int) -> int:
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"{server.url}/api/v1/jobs/{job_id}/metrics/summary"
    return sum(m["points"] for m in httpx.get(url, headers=headers, timeout=30).json())
