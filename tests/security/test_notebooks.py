"""Notebooks against other users: a notebook is its team's to see, and its owner's alone to
open or resume. A member of another team cannot see, stop, resume, open it or reach its
kernel's WebSocket (404); a teammate and an admin see it but cannot open or resume it; its
token is shown nowhere; once its owner's stop returns, nothing reaches it. A hostile kernel
(``hostile.ACTIONS``, run in a notebook of team B) reaches nothing of team A's running job
or the server.

One server (as root: each user's work under an account of its own), one notebook of each
team: JupyterLab's start-up is the slow part.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.security import hostile
from tests.security.conftest import Pool
from tests.security.test_hostile_job import VICTIM, _targets
from tests.support.notebooks import Lab
from tests.support.waiting import wait_for

# a hostile kernel runs the same program as the hostile job, with its targets as its argv
IN_KERNEL = (
    "import os, sys\nos.environ['HOSTILE_TOKEN'] = {token!r}\nsys.argv = ['hostile', {targets!r}]\n"
)


KERNEL_IOPUB = (
    "from ipykernel import get_connection_info\n"
    "print('IOPUB=' + str(get_connection_info(unpack=True)['iopub_port']))"
)


@pytest.mark.parametrize("pool", ["root"], indirect=True)
def test_notebooks_are_their_owners_alone_and_a_hostile_kernel_reaches_nothing(
    pool: Pool, exchange: Path
) -> None:
    owner, team_a = pool.member("team-a")
    _, teammate = pool.member("team-a")
    _, team_b = pool.member("team-b")
    victim = pool.submit(
        team_a, [sys.executable, "-c", VICTIM], resources={"gpus": 1}, workdir=str(exchange)
    )
    mine = _start(team_a, {"gpus": 1})
    theirs = _start(team_b, {"gpus": 1})
    wait_for(lambda: "victim ready" in pool.log(victim["id"]), 60, "team A's job to run")
    lab = Lab(pool.server.url, mine["id"], _token(team_a))
    lab.answering()
    kernel = lab.start_kernel()

    _others_get_404(pool, mine["id"], team_b, kernel, seen=False)
    _others_get_404(pool, mine["id"], teammate, kernel, seen=True)
    _others_get_404(pool, mine["id"], pool.admin, kernel, seen=True)
    _token_shown_nowhere(pool, mine, lab)

    hostile_lab = Lab(pool.server.url, theirs["id"], _token(team_b))
    hostile_lab.answering()
    targets = _targets(pool, victim["id"], exchange) | {"victim_user": owner}
    # the owner's kernel's iopub channel: on the node's loopback, any subscriber got every
    # output of it (the HMAC key signs messages, it keeps no one out)
    iopub = lab.run(kernel, KERNEL_IOPUB).split("IOPUB=")[1].split()[0]
    targets |= {"victim_port": int(iopub)}
    code = IN_KERNEL.format(token=team_b.headers["Authorization"], targets=json.dumps(targets))
    printed = hostile_lab.run(hostile_lab.start_kernel(), code + hostile.script(), timeout=120)
    found = hostile.outcomes(printed)
    assert hostile.allowed(found) == {}, found
    own_uid = hostile.uid(lab.run(kernel, "import os\nprint('UID=' + str(os.getuid()))"))
    assert hostile.uid(printed) not in (0, own_uid), "each notebook runs as its owner's account"
    assert pool.job(victim["id"])["status"] == "running"
    (exchange / "release").touch()
    assert pool.wait(victim["id"], {"succeeded", "failed"})["status"] == "succeeded"
    _a_stop_closes_it_before_it_returns(team_a, lab, mine["id"], kernel)


def _a_stop_closes_it_before_it_returns(
    owner: httpx.Client, lab: Lab, notebook: int, kernel: str
) -> None:
    """Once its owner's stop has returned, nothing reaches the notebook through the proxy,
    though its job may still be ending (its route is withdrawn by the stop itself)."""
    assert owner.post(f"/notebooks/{notebook}/stop").status_code == 200
    answer = lab.get("api/kernels")
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "notebook_not_running"
    with pytest.raises(InvalidStatus) as refused:
        connect(lab.channels_url(kernel), additional_headers=lab.headers)
    assert refused.value.response.status_code == 503


def _start(client: httpx.Client, resources: dict) -> dict:
    answer = client.post("/notebooks", json={"resources": resources})
    assert answer.status_code == 201, answer.text
    return answer.json()


def _token(client: httpx.Client) -> str:
    return client.headers["Authorization"].removeprefix("Bearer ")


def _others_get_404(
    pool: Pool, notebook: int, other: httpx.Client, kernel: str, seen: bool
) -> None:
    """``other`` sees the notebook when ``seen`` (its team, an admin), else gets 404; it
    can never resume or open it, nor reach its kernel."""
    shown = other.get(f"/notebooks/{notebook}")
    assert shown.status_code == (200 if seen else 404), shown.text
    listed = {n["id"] for n in other.get("/notebooks").json()}
    assert (notebook in listed) == seen
    assert other.post(f"/notebooks/{notebook}/resume").status_code == 404
    if not seen:
        assert other.post(f"/notebooks/{notebook}/stop").status_code == 404
    lab = Lab(pool.server.url, notebook, _token(other))
    for path in ("lab", "api/kernels", "api/contents", f"api/kernels/{kernel}"):
        answer = lab.get(path)
        assert answer.status_code == 404, (path, answer.status_code)
    with pytest.raises(InvalidStatus) as refused:
        connect(lab.channels_url(kernel), additional_headers=lab.headers)
    assert refused.value.response.status_code == 404


def _token_shown_nowhere(pool: Pool, notebook: dict, lab: Lab) -> None:
    """The notebook's token is in no answer of the API, its job's spec, log or pages; nor
    is JupyterLab's own login cookie (as good as its token on its port)."""
    database = pool.server.data_dir / "gpupool.db"
    with sqlite3.connect(database) as db:
        (token,) = db.execute(
            "SELECT token FROM notebooks WHERE id = ?", (notebook["id"],)
        ).fetchone()
    assert token
    answers = [
        pool.admin.get(f"/notebooks/{notebook['id']}").text,
        pool.admin.get(f"/jobs/{notebook['job_id']}").text,
        pool.log(notebook["job_id"]),
        lab.get("lab").text,
        lab.get("api/status").text,
    ]
    assert not [a for a in answers if token in a]
    cookies = lab.get("api/status").headers.get_list("set-cookie")
    assert not [c for c in cookies if c.startswith("username-")], "JupyterLab's login cookie"
