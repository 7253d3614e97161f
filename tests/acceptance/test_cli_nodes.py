"""Acceptance tests of `gpupool node drain / undrain / remove / show` and `gpupool nodes`,
with the real CLI against a real server."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import Cli, hold, refused, wait_for, wait_status


def test_an_admin_drains_and_undrains_the_node_and_everyone_sees_it(
    admin: Cli, exchange: Path, release: Path
) -> None:
    (node,) = admin.json("nodes")
    name = node["name"]
    held = admin.submit("--gpus", "1", "--workdir", str(exchange), *hold(release))
    wait_status(admin, held, {"running"})

    said = admin.ok("node", "drain", name, "--reason", "disk swap")
    assert f"node {name} drained (disk swap): no new work is placed there" in said
    listed = admin.ok("nodes")
    assert "drained (disk swap)" in listed and "state: up" in listed and "not schedulable" in listed
    assert admin.json("nodes")[0]["drain_reason"] == "disk swap"
    waiting = admin.submit("--gpus", "1", "--", "true")
    why = wait_for(lambda: _says(admin, waiting, "no schedulable nodes"), what="a reason")
    assert admin.job(waiting)["status"] == "pending", why
    release.touch()
    assert wait_status(admin, held, {"succeeded", "failed"})["status"] == "succeeded"

    assert "new work may be placed there again" in admin.ok("node", "undrain", name)
    assert wait_status(admin, waiting, {"succeeded", "failed"})["status"] == "succeeded"
    shown = admin.ok("node", "show", name)
    assert "Drained" in shown and "Undrained" in shown and "disk swap" in shown
    assert [e["reason"] for e in admin.json("node", "show", name)["events"]][-2:] == [
        "Drained",
        "Undrained",
    ]


def test_what_is_refused_says_why(admin: Cli) -> None:
    name = admin.json("nodes")[0]["name"]
    own = admin("node", "remove", name)
    assert refused(own, "own_node") and f"gpupool node drain {name}" in own.stderr
    assert refused(admin("node", "drain", "nowhere"), "not_found")
    admin.ok("users", "create", "mia", "--role", "member", "--team", "default")
    secret = admin.ok("tokens", "create", "--user", "mia", "--name", "mia-cli").strip()
    mia = Cli(admin.url, secret)
    assert refused(mia("node", "drain", name), "forbidden")
    assert refused(mia("node", "remove", name), "forbidden")
    assert "state: up" in mia.ok("node", "show", name), "anyone signed in may look"
    assert admin.json("nodes")[0]["drain"] is False


def _says(cli: Cli, job_id: int, text: str) -> str | None:
    answer = cli.ok("why", str(job_id))
    return answer if text in answer else None
