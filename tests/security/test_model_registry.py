"""Hostile use of the model registry: a member of another team lists, reads and registers
from a team's models and jobs; a job leaves links and special files in its outputs to make
the server copy what it must not (another job's outputs, the server's own files), or hang.
Everything is refused (404 for what another team cannot see), and nothing leaks."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gpupool.services.platform import Platform
from tests.support.platform import make_settings, refused, running_app, wait_job

MODELS = "/api/v1/models"
SECRET = b"audio-team-weights-7f3a"
# links out of the outputs (to the server's files, to another job's outputs), a link to a
# directory, a FIFO that would block a reader, and one good file below "ok"
HOSTILE = (
    'cd "$GPUPOOL_OUTPUT_DIR" && mkdir ok links fifo dirlink && echo fine > ok/w.bin'
    " && ln -s /etc/passwd links/passwd && ln -s ../../../{other}/outputs/secret.bin links/other"
    " && mkfifo fifo/pipe && ln -s /etc dirlink/etc && ln -s /etc escape"
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Teams vision and audio, a member of each and a viewer of vision; audio's job left a
    secret in its outputs, vision's job a hostile tree, and vision has a model."""
    data = tmp_path_factory.mktemp("hostile-models") / "data"
    with running_app(make_settings(data)) as (admin, platform):
        headers = {name: _user(admin, name, team, role) for name, team, role in USERS}
        secret = _job(admin, headers["ada"], f"printf '{SECRET.decode()}' > $OUT/secret.bin")
        hostile = _job(admin, headers["vic"], HOSTILE.format(other=secret))
        answer = admin.post(
            f"{MODELS}/vision-model/versions",
            json={"job_id": hostile, "path": "ok"},
            headers=headers["vic"],
        )
        assert answer.status_code == 201, answer.text
        yield {"client": admin, "platform": platform, "headers": headers} | {
            "secret_job": secret,
            "hostile_job": hostile,
        }


USERS = (("vic", "vision", "member"), ("val", "vision", "viewer"), ("ada", "audio", "member"))


def test_another_teams_member_cannot_list_show_or_register_from_its_jobs(world: dict) -> None:
    client, ada = world["client"], world["headers"]["ada"]

    assert client.get(MODELS, headers=ada).json() == []
    assert client.get(MODELS, params={"team": "vision"}, headers=ada).json() == []
    refused(client.get(f"{MODELS}/vision-model", headers=ada), 404, "not_found")
    refused(client.get(f"{MODELS}/vision-model/versions/1", headers=ada), 404, "not_found")
    stolen = {"job_id": world["hostile_job"], "path": "ok"}
    refused(client.post(f"{MODELS}/mine/versions", json=stolen, headers=ada), 404, "not_found")
    refused(
        client.post(f"{MODELS}/vision-model/versions", json=stolen, headers=ada), 404, "not_found"
    )
    assert (
        client.get(f"{MODELS}/vision-model", headers=world["headers"]["vic"]).json()[
            "latest_version"
        ]
        == 1
    )  # nothing was added to vision's model


def test_a_name_is_per_team_so_another_team_cannot_add_to_a_teams_model(world: dict) -> None:
    client, headers = world["client"], world["headers"]
    own = {"job_id": world["secret_job"]}
    mine = client.post(f"{MODELS}/vision-model/versions", json=own, headers=headers["ada"])

    assert mine.status_code == 201, mine.text
    assert (mine.json()["team"], mine.json()["version"]) == ("audio", 1)
    vision = client.get(f"{MODELS}/vision-model", headers=headers["vic"]).json()
    assert (vision["team"], vision["version_count"]) == ("vision", 1)
    ambiguous = client.get(f"{MODELS}/vision-model")  # the admin sees both
    refused(ambiguous, 422, "ambiguous_model")


def test_a_viewer_reads_the_teams_models_but_cannot_register(world: dict) -> None:
    client, val = world["client"], world["headers"]["val"]
    assert client.get(f"{MODELS}/vision-model", headers=val).status_code == 200

    body = {"job_id": world["hostile_job"], "path": "ok"}
    refused(
        client.post(f"{MODELS}/vision-model/versions", json=body, headers=val), 403, "forbidden"
    )


@pytest.mark.parametrize(
    "path",
    [
        "",  # the whole outputs: the links and the FIFO in them
        "links",  # links to the server's files and to another job's outputs
        "links/passwd",
        "links/other",
        "fifo",  # would block a reader forever
        "dirlink",  # a link to a directory (outside)
        "escape",  # a --path that is itself a link leading out
        "../../..",
        "/etc",
    ],
)
def test_links_special_files_and_paths_out_of_the_outputs_are_refused(
    world: dict, path: str
) -> None:
    client, vic = world["client"], world["headers"]["vic"]
    body = {"job_id": world["hostile_job"], "path": path}

    answer = client.post(f"{MODELS}/stolen/versions", json=body, headers=vic)

    refused(answer, 422, "bad_model_path")
    assert SECRET.decode() not in answer.text and "root:" not in answer.text
    assert client.get(f"{MODELS}/stolen", headers=vic).status_code == 404


def test_a_file_name_that_is_not_utf8_is_refused_by_name_not_a_500(world: dict) -> None:
    """A job can name a file with any bytes; an archive's names are UTF-8 (PAX), so such a
    file is refused with its name escaped, and nothing is stored."""
    client, vic = world["client"], world["headers"]["vic"]
    job = _job(client, vic, "mkdir -p $OUT/w && : > \"$OUT/w/$(printf '\\377\\376.bin')\"")

    answer = client.post(f"{MODELS}/odd/versions", json={"job_id": job}, headers=vic)

    refused(answer, 422, "invalid_file_name")
    assert "w/\\xff\\xfe.bin" in answer.json()["error"]["message"]
    assert client.get(f"{MODELS}/odd", headers=vic).status_code == 404


def test_nothing_refused_was_stored(world: dict) -> None:
    """No archive of the store holds the server's files, and vision's holds no secret of
    audio's; no half-written archive is left behind."""
    platform: Platform = world["platform"]
    vision = world["client"].get(f"{MODELS}/vision-model/versions/1", params={"team": "vision"})
    for archive in (platform.settings.models_dir / "sha256").iterdir():
        assert b"root:" not in gzip.decompress(archive.read_bytes())
        if archive.name.startswith(vision.json()["archive"].removeprefix("sha256:")):
            assert SECRET not in gzip.decompress(archive.read_bytes())
    assert not list((platform.settings.models_dir / "incoming").iterdir())


def _user(admin: TestClient, name: str, team: str, role: str) -> dict[str, str]:
    if team not in {t["name"] for t in admin.get("/api/v1/teams").json()}:
        assert admin.post("/api/v1/teams", json={"name": team}).status_code == 201
    body = {"name": name, "teams": [team], "role": role}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = admin.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
    return {"Authorization": f"Bearer {token}"}


def _job(admin: TestClient, headers: dict[str, str], script: str) -> int:
    command = ["sh", "-c", 'OUT="$GPUPOOL_OUTPUT_DIR"; ' + script]
    answer = admin.post("/api/v1/jobs", json={"command": command}, headers=headers)
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert wait_job(admin, job["id"])["status"] == "succeeded"
    return job["id"]
