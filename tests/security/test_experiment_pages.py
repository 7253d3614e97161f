"""Hostile use of the experiments' pages: a member of another team asks for a team's
experiment page by id and by name, lists experiments, and registers the best trial's outputs
as a model of its own (the page's form calls the model registry); a viewer of the team reads
the page but is offered no button; names and choices holding markup are shown as text, in the
tables and inside the charts' SVG."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.errors import NotFound
from gpupool.services import experiments, identity
from gpupool.services.core import Principal
from tests.support.platform import make_settings, refused, running_app, wait_for

MARKUP = "<img src=x onerror=alert(1)>"
TRIAL = (
    "import json, os\n"
    "from gpupool import metrics\n"
    "p = json.loads(os.environ['GPUPOOL_PARAMS'])\n"
    "open(os.path.join(os.environ['GPUPOOL_OUTPUT_DIR'], 'w.bin'), 'w').write('w')\n"
    "for step in (1, 2):\n"
    "    metrics.log(step=step, error=p['x'] / step)\n"
)
USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Team vision's experiment (a name and a choice holding markup) that ended with a best
    trial; a member and a viewer of vision and a member of audio, each signed in to the web
    UI with a client of their own."""
    data = tmp_path_factory.mktemp("hostile-experiments") / "data"
    with running_app(make_settings(data)) as (admin, platform):
        tokens = {name: _user(admin, name, team, role) for name, team, role in USERS}
        made = admin.post("/api/v1/experiments", json=_search(), headers=_bearer(tokens["vic"]))
        assert made.status_code == 201, made.text
        ref = made.json()["id"]
        wait_for(lambda: _ended(admin, ref), 90, "the experiment ends", 0.1)
        pages = {name: _signed_in(admin, name, token) for name, token in tokens.items()}
        yield {"admin": admin, "platform": platform, "ref": ref, "tokens": tokens} | {
            "pages": pages
        }
        for page in pages.values():
            page.close()


def test_another_teams_member_gets_404_pages_and_an_empty_list(world: dict) -> None:
    ada, ref = world["pages"]["ada"], world["ref"]

    for address in (f"/experiments/{ref}", f"/experiments/{MARKUP}", "/experiments/99999"):
        page = ada.get(address)
        assert page.status_code == 404, address
        assert page.headers["content-type"].startswith("text/html")
        assert "No experiment" in page.text and "w.bin" not in page.text
    listed = ada.get("/experiments")
    assert listed.status_code == 200
    assert "No experiments yet" in listed.text and "onerror" not in listed.text
    assert world["pages"]["vic"].get(f"/experiments/{ref}").status_code == 200


def test_another_teams_member_cannot_read_the_curves_or_register_the_best_trial(
    world: dict,
) -> None:
    admin, ref = world["admin"], world["ref"]
    best = admin.get(f"/api/v1/experiments/{ref}").json()["best"]
    assert best is not None

    with pytest.raises(NotFound):
        experiments.curves(world["platform"], _principal(world, "ada"), str(ref))
    stolen = {"job_id": best["job_id"], "team": "vision"}
    answer = admin.post(
        "/api/v1/models/stolen/versions", json=stolen, headers=_bearer(world["tokens"]["ada"])
    )
    refused(answer, 404, "not_found")


def test_a_viewer_reads_the_page_but_is_offered_no_button(world: dict) -> None:
    page = world["pages"]["val"].get(f"/experiments/{world['ref']}")

    assert page.status_code == 200
    assert 'id="trial-rows"' in page.text and 'id="parallel"' in page.text
    assert 'id="manage"' not in page.text and 'id="register-form"' not in page.text


def test_markup_in_a_name_and_a_choice_is_shown_as_text(world: dict) -> None:
    vic = world["pages"]["vic"]
    for page in (vic.get("/experiments").text, vic.get(f"/experiments/{world['ref']}").text):
        assert MARKUP not in page and "<script>" not in page
        assert "&lt;img src=x onerror=alert(1)&gt;" in page


# -- helpers ---------------------------------------------------------------------------------


def _search() -> dict:
    return {
        "name": f"tune{MARKUP}",
        "objective": {"metric": "error"},
        "parameters": {
            "x": {"type": "float", "low": 0.1, "high": 1.0},
            "how": {"type": "categorical", "choices": [MARKUP, "plain"]},
        },
        "sampler": {"name": "random", "seed": 1},
        "max_trials": 2,
        "max_concurrent": 2,
        "trial": {"command": [sys.executable, "-c", TRIAL], "resources": {"cpus": 0.5}},
    }


def _ended(admin: TestClient, ref: int) -> bool:
    return admin.get(f"/api/v1/experiments/{ref}").json()["status"] not in ("running", "paused")


def _user(admin: TestClient, name: str, team: str, role: str) -> str:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    return admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _signed_in(admin: TestClient, name: str, token: str) -> TestClient:
    """A browser-like client of the same app, signed in as ``name`` (a session cookie)."""
    client = TestClient(admin.app)
    answer = client.post("/api/v1/session", json={"user": name, "password": token})
    assert answer.status_code == 200, answer.text
    return client


def _principal(world: dict, name: str) -> Principal:
    """The user of ``name``'s token, as the REST API sees them."""
    return identity.by_token(world["platform"], world["tokens"][name], "127.0.0.1")
