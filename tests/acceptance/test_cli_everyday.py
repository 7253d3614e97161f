"""Acceptance tests of the CLI's everyday commands and its first-contact messages: the version,
suggestions for unknown commands, a stopped server, passwords, disabled users, team
membership and team deletion. The real CLI against a real server."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx

import gpupool
from gpupool.cli.main import COMMANDS
from gpupool.main import OPERATOR_COMMANDS
from tests.support.cli import FINAL, Cli, refused, wait_status
from tests.support.server import ServerProcess, free_port


def new_user(admin: Cli, name: str, team: str = "default") -> Cli:
    """A member of ``team`` with a token; the CLI as that user."""
    admin.ok("users", "create", name, "--team", team)
    return Cli(admin.url, admin.ok("tokens", "create", "--user", name).strip())


def signs_in(pool: ServerProcess, user: str, password: str) -> bool:
    """True when the web UI's sign-in takes this password."""
    answer = httpx.post(f"{pool.url}/api/v1/session", json={"user": user, "password": password})
    return answer.status_code == 200


# Runs the CLI's entry point and prints, at exit, every module the process has loaded
PROBE = (
    "import atexit, sys; from gpupool.main import main; "
    "atexit.register(lambda: print('MODULES', *sys.modules, file=sys.stderr)); main()"
)


def imported(*args: str) -> set[str]:
    """The modules ``gpupool ARGS`` loads (talking to a server that does not answer)."""
    env = {"GPUPOOL_URL": f"http://127.0.0.1:{free_port()}", "GPUPOOL_TOKEN": "gpt_x"}
    command = [sys.executable, "-c", PROBE, *args]
    result = subprocess.run(command, env=Cli("").env() | env, capture_output=True, text=True)
    lines = [line for line in result.stderr.splitlines() if line.startswith("MODULES ")]
    assert len(lines) == 1, result.stderr
    return set(lines[0].split()[1:])


# -- first contact ---------------------------------------------------------------------------


def test_version_prints_the_version() -> None:
    result = Cli("")("--version")
    assert (result.returncode, result.stdout) == (0, f"gpupool {gpupool.__version__}\n")


def test_help_lists_every_command_with_its_help_line() -> None:
    shown = Cli("").ok("--help")
    listed = {name for name in re.findall(r"^\W (\S+) ", shown, re.M) if name[0] != "-"}
    visible = {name for name, entry in COMMANDS.items() if not entry.hidden}
    assert listed == visible | set(OPERATOR_COMMANDS)
    assert "--version" in shown
    assert "Change your own web UI password" in shown


def test_a_command_loads_only_its_own_modules() -> None:
    modules = imported("show", "12")
    assert "gpupool.cli.jobs" in modules
    assert not modules & {"gpupool.cli.admin", "gpupool.server", "gpupool.sim.cli", "httpx"}
    listing = imported("ls")  # run without Typer (gpupool.cli.quick)
    assert "gpupool.cli.listing" in listing
    assert not listing & {"gpupool.cli.jobs", "gpupool.cli.admin", "gpupool.server", "typer"}
    assert "typer" not in imported("--version")


def test_an_unknown_command_gets_the_commands_meant() -> None:
    submit, status, typo = Cli("")("submit"), Cli("")("status"), Cli("")("lgos", "12")
    assert submit.returncode == status.returncode == typo.returncode == 2
    assert "No such command 'submit'. Did you mean 'run'?" in submit.stderr
    assert "Did you mean 'ls' or 'show'?" in status.stderr
    assert "Did you mean 'logs'" in typo.stderr


def test_a_stopped_server_is_named_with_how_to_start_one() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = Cli(url, "gpt_any")("ls")
    assert refused(result, "server_unreachable"), result.stderr
    assert f"no gpupool server answers at {url}" in result.stderr
    assert "`gpupool server`" in result.stderr and "`gpupool login URL`" in result.stderr


# -- passwords -------------------------------------------------------------------------------


def test_an_admin_sets_a_password_from_stdin_that_signs_in(admin: Cli, pool: ServerProcess) -> None:
    new_user(admin, "paula")
    admin.ok("users", "set-password", "paula", "--password-stdin", stdin="paula-secret-1\n")
    assert signs_in(pool, "paula", "paula-secret-1")
    assert not signs_in(pool, "paula", "another-one")


def test_a_member_changes_its_own_password(admin: Cli, pool: ServerProcess) -> None:
    mona = new_user(admin, "mona")
    assert "password of mona changed" in mona.ok(
        "passwd", "--password-stdin", stdin="\nfirst-pass\n"
    )
    assert signs_in(pool, "mona", "first-pass")

    wrong = mona("passwd", "--password-stdin", stdin="not-it\nsecond-pass\n")
    assert refused(wrong, "wrong_password"), wrong.stderr
    assert refused(mona("passwd", "--password-stdin", stdin="first-pass\n"), "invalid_request")
    assert refused(
        mona("passwd", "--password-stdin", stdin="first-pass\nshort\n"), "invalid_request"
    )
    mona.ok("passwd", "--password-stdin", stdin="first-pass\nsecond-pass\n")
    assert signs_in(pool, "mona", "second-pass")
    assert not signs_in(pool, "mona", "first-pass")

    others = mona("users", "set-password", "admin", "--password-stdin", stdin="hijacked-1\n")
    assert refused(others, "forbidden") and "gpupool passwd" in others.stderr


# -- users and teams -------------------------------------------------------------------------


def test_a_disabled_user_is_refused_until_enabled(admin: Cli) -> None:
    dora = new_user(admin, "dora")
    assert "dora is disabled" in admin.ok("users", "disable", "dora")
    assert refused(dora("whoami"), "unauthenticated")
    assert next(u for u in admin.json("users") if u["name"] == "dora")["disabled"]
    assert "dora is enabled" in admin.ok("users", "enable", "dora")
    assert dora.ok("whoami").startswith("dora (member of default)")

    assert refused(dora("users", "disable", "admin"), "forbidden")
    assert refused(admin("users", "disable", "admin"), "last_admin")


def test_a_user_added_to_a_team_sees_its_jobs(admin: Cli) -> None:
    admin.ok("team", "create", "vision")
    vera = new_user(admin, "vera")
    job_id = admin.submit("--team", "vision", "--", "true")
    wait_status(admin, job_id, FINAL)
    assert job_id not in [job["id"] for job in vera.json("ls", "--all")]

    assert "vera is a member of vision" in admin.ok("team", "add-member", "vision", "vera")
    assert job_id in [job["id"] for job in vera.json("ls", "--all")]
    assert vera.ok("whoami").startswith("vera (member of default, vision)")

    assert "vera left vision" in admin.ok("team", "remove-member", "vision", "vera")
    assert job_id not in [job["id"] for job in vera.json("ls", "--all")]
    assert refused(admin("team", "remove-member", "vision", "vera"), "not_found")
    assert refused(admin("team", "add-member", "nope", "vera"), "unknown_team")
    assert refused(vera("team", "add-member", "default", "vera"), "forbidden")  # a member
    assert refused(vera("team", "add-member", "vision", "vera"), "not_found")  # not its team


def test_a_team_is_deleted_once_its_jobs_have_ended(admin: Cli) -> None:
    admin.ok("team", "create", "audio")
    andy = new_user(admin, "andy", "audio")
    job_id = andy.submit("--", "sleep", "120")

    busy = admin("team", "delete", "audio")
    assert refused(busy, "team_not_empty") and "gpupool cancel" in busy.stderr
    assert "audio" in [team["name"] for team in admin.json("team")]
    andy.ok("cancel", str(job_id))
    wait_status(admin, job_id, FINAL)

    assert "team audio deleted" in admin.ok("team", "delete", "audio")
    assert "audio" not in [team["name"] for team in admin.json("team")]
    assert admin.job(job_id)["status"] == "cancelled"  # its record stays
    assert andy.ok("whoami").startswith("andy (member of no team)")
    assert refused(andy("run", "--team", "audio", "--", "true"), "unknown_team")
    assert refused(admin("team", "delete", "audio"), "unknown_team")
    assert refused(admin("team", "delete", "default"), "default_team")

    admin.ok("team", "create", "audio")  # the name is free again
    assert admin.job(job_id)["team"] == "audio (deleted)"  # not the new audio's
    listed = admin.ok("ls", "--all")
    assert re.search(rf"^\s*{job_id}\s.*audio \(deleted\)", listed, re.M), listed
    assert "team audio deleted" in admin.ok("team", "delete", "audio")


def test_a_team_admin_changes_its_teams_members_and_nothing_else(admin: Cli) -> None:
    admin.ok("team", "create", "speech")
    tara = new_user(admin, "tara", "speech")
    new_user(admin, "tom")
    assert "tara is a team admin of speech" in admin.ok("team", "set-admin", "speech", "tara")
    assert tara.ok("whoami").startswith("tara (member of speech; team admin of speech)")
    assert tara.json("whoami")["admin_of"] == ["speech"]
    assert [team["admins"] for team in tara.json("team")] == [["tara"]]
    assert "tara" in tara.ok("team")  # its ADMINS column

    assert "tom is a member of speech" in tara.ok("team", "add-member", "speech", "tom")
    made = tara.ok("team", "add-member", "speech", "tom", "--admin")
    assert "tom is a team admin of speech" in made
    unmade = tara.ok("team", "set-admin", "speech", "tom", "--no")
    assert "tom is no longer a team admin of speech" in unmade
    assert "tom left speech" in tara.ok("team", "remove-member", "speech", "tom")

    assert refused(tara("team", "add-member", "default", "tara"), "not_found")
    assert refused(tara("team", "set-quota", "speech", "--limit", "8"), "forbidden")
    assert refused(tara("team", "delete", "speech"), "forbidden")
    admin.ok("team", "set-admin", "speech", "tara", "--no")
    assert refused(tara("team", "add-member", "speech", "tom"), "forbidden")
