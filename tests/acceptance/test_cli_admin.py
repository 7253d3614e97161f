"""Acceptance tests of the admin commands (users, teams, tokens) and what roles may do."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import FINAL, Cli, hold, refused, wait_status


def new_user(admin: Cli, name: str, role: str, team: str) -> Cli:
    """Create a user in ``team`` with a token; return the CLI as that user."""
    admin.ok("users", "create", name, "--role", role, "--team", team)
    secret = admin.ok("tokens", "create", "--user", name, "--name", f"{name}-cli").strip()
    assert secret and "\n" not in secret
    return Cli(admin.url, secret)


def test_a_member_sees_only_its_teams_jobs(admin: Cli) -> None:
    assert "team ml created" in admin.ok("teams", "create", "ml")
    assert "ml" in [team["name"] for team in admin.json("teams")]
    alice = new_user(admin, "alice", "member", "ml")
    users = {user["name"]: user for user in admin.json("users")}
    assert (users["alice"]["role"], users["alice"]["teams"]) == ("member", ["ml"])
    assert "alice" in admin.ok("users")

    theirs = admin.submit("--team", "default", "--", "true")
    mine = alice.submit("--", "true")
    assert wait_status(alice, mine, FINAL)["team"] == "ml"
    assert [job["id"] for job in alice.json("ls", "--all")] == [mine]
    assert {theirs, mine} <= {job["id"] for job in admin.json("ls", "--all")}

    assert refused(alice("show", str(theirs)), "not_found")
    assert refused(alice("logs", str(theirs)), "not_found")
    assert refused(alice("cancel", str(theirs)), "not_found")
    assert refused(alice("run", "--team", "default", "--", "true"), "unknown_team")
    assert refused(alice("users"), "forbidden")


def test_a_viewer_cannot_submit_until_made_a_member(admin: Cli) -> None:
    admin.ok("teams", "create", "vision")
    viewer = new_user(admin, "vic", "viewer", "vision")
    assert viewer.ok("whoami").startswith("vic (viewer of vision)")
    assert refused(viewer("run", "--", "true"), "forbidden")
    assert viewer.json("ls", "--all") == []

    assert "vic is now member" in admin.ok("users", "set-role", "vic", "member")
    job_id = viewer.submit("--", "true")
    assert wait_status(viewer, job_id, FINAL)["status"] == "succeeded"
    assert admin("users", "set-role", "vic", "emperor").returncode == 2


def test_passwords_are_read_from_stdin(admin: Cli) -> None:
    admin.ok(
        "users", "create", "pat", "--team", "default", "--password-stdin", stdin="first-password\n"
    )
    assert _user(admin, "pat")["has_password"]
    admin.ok("users", "create", "quinn", "--team", "default")
    assert not _user(admin, "quinn")["has_password"]
    admin.ok("users", "set-password", "quinn", "--password-stdin", stdin="s3cret-enough\n")
    assert _user(admin, "quinn")["has_password"]
    assert refused(
        admin("users", "set-password", "quinn", "--password-stdin", stdin=""), "invalid_request"
    )
    assert refused(
        admin("users", "set-password", "nobody", "--password-stdin", stdin="x\n"), "not_found"
    )


def test_tokens_are_listed_and_revoked(admin: Cli) -> None:
    admin.ok("users", "create", "rita", "--team", "default")
    rita = Cli(
        admin.url, admin.ok("tokens", "create", "--user", "rita", "--expires-in-days", "7").strip()
    )
    assert rita.ok("whoami").startswith("rita (member of default)")
    mine = [token for token in rita.json("tokens") if token["user"] == "rita"]
    assert len(mine) == 1 and mine[0]["expires_at"] is not None and not mine[0]["revoked"]
    assert "rita" in admin.ok("tokens")

    assert f"token {mine[0]['id']} of rita revoked" in admin.ok(
        "tokens", "revoke", str(mine[0]["id"])
    )
    assert refused(rita("whoami"), "unauthenticated")
    revoked = [token for token in admin.json("tokens") if token["id"] == mine[0]["id"]]
    assert revoked[0]["revoked"]


def _user(admin: Cli, name: str) -> dict:
    return next(user for user in admin.json("users") if user["name"] == name)


def test_nodes_show_another_teams_job_without_its_name(
    admin: Cli, release: Path, exchange: Path
) -> None:
    admin.ok("teams", "create", "nlp")
    nia = new_user(admin, "nia", "member", "nlp")
    job_id = admin.submit(
        "--team", "default", "--gpus", "1", "--name", "hidden-run", "--workdir", str(exchange),
        *hold(release),
    )  # fmt: skip
    wait_status(admin, job_id, {"running"})
    assert f"job {job_id} (admin, 1)" in admin.ok("nodes")

    table = nia.ok("nodes")
    assert "another team's job (1)" in table
    assert f"job {job_id}" not in table and "admin" not in table
    holders = [h for node in nia.json("nodes") for gpu in node["gpus"] for h in gpu["holders"]]
    assert [(h["other_team"], h["job_id"], h["job_name"], h["user"]) for h in holders] == [
        (True, None, None, None)
    ]
    release.touch()
    wait_status(admin, job_id, FINAL)
