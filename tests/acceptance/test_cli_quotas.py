"""Acceptance tests of team quotas and the policy options of `gpupool run`, driven through the
real CLI against a real server (4 declared A100s)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import FINAL, Cli, hold, refused, wait_status

# -- gpupool team ----------------------------------------------------------------------------


def test_team_create_with_a_quota_and_the_table(admin: Cli) -> None:
    created = admin.ok(
        "team", "create", "nlp", "--guarantee", "1", "--guarantee", "A100=1", "--limit", "4"
    )
    assert "team nlp created: guarantee 1, A100=1, limit 4, weight 1" in created
    nlp = _team(admin, "nlp")
    assert (nlp["guarantee"], nlp["limit"], nlp["weight"]) == ({"*": 1, "A100": 1}, 4, 1)

    row = next(line for line in admin.ok("team").splitlines() if line.startswith("nlp "))
    assert row.split()[:7] == ["nlp", "1,", "A100=1", "4", "1", "0", "0"]
    assert row.split()[-1] == "-"  # ADMINS; STORAGE before it
    header = admin.ok("team").splitlines()[0].split()
    assert header == [
        *("TEAM", "GUARANTEE", "LIMIT", "WEIGHT", "IN", "USE", "PENDING", "STORAGE", "ADMINS")
    ]


def test_set_quota_changes_only_what_is_given(admin: Cli) -> None:
    admin.ok("team", "create", "rl", "--guarantee", "1", "--limit", "3")
    assert "weight 2" in admin.ok("team", "set-quota", "rl", "--weight", "2")
    rl = _team(admin, "rl")
    assert (rl["guarantee"], rl["limit"], rl["weight"]) == ({"*": 1}, 3, 2)
    admin.ok("team", "set-quota", "rl", "--guarantee", "0", "--no-limit")
    rl = _team(admin, "rl")
    assert (rl["guarantee"], rl["limit"], rl["weight"]) == ({}, None, 2)


def test_a_storage_quota_is_set_kept_shown_and_removed(admin: Cli) -> None:
    assert "storage 10 GiB" in admin.ok("team", "create", "data", "--storage", "10GiB")
    assert _team(admin, "data")["storage"]["quota"] == 10 * 1024**3
    assert "storage 2 TiB" in admin.ok("team", "set-quota", "data", "--storage", "2TiB")
    kept = admin.ok("team", "set-quota", "data", "--weight", "2")
    assert "weight 2, storage 2 TiB" in kept
    shown = admin.ok("team", "show", "data")
    assert "storage" in shown and "of 2 TiB" in shown, shown
    admin.ok("team", "set-quota", "data", "--no-storage")
    assert _team(admin, "data")["storage"]["quota"] is None
    bad = admin("team", "set-quota", "data", "--storage", "lots")
    assert bad.returncode == 2 and "is not a size" in bad.stderr, bad.stderr


def test_quota_refusals_keep_their_codes(admin: Cli) -> None:
    admin.ok("team", "create", "speech", "--guarantee", "1")
    over = admin("team", "set-quota", "speech", "--guarantee", "A100=8")
    assert refused(over, "guarantees_exceed_pool") and "4 A100 GPUs" in over.stderr
    low = admin("team", "create", "asr", "--guarantee", "2", "--limit", "1")
    assert refused(low, "limit_below_guarantee")
    assert refused(admin("team", "set-quota", "nobody", "--weight", "2"), "unknown_team")
    for bad in (["--guarantee", "many"], ["--guarantee", "=2"], ["--limit", "-1"]):
        usage = admin("team", "set-quota", "speech", *bad)
        assert usage.returncode == 2 and "Traceback" not in usage.stderr, bad


def test_the_old_teams_command_still_works(admin: Cli) -> None:
    assert "team vision2 created" in admin.ok("teams", "create", "vision2")
    assert "vision2" in [team["name"] for team in admin.json("teams")]
    listed = [line.strip("│ ").split(" ")[0] for line in admin.ok("--help").splitlines()]
    assert "team" in listed and "teams" not in listed, "the old name is a hidden alias"


def test_the_team_table_counts_gpus_in_use_and_pending_jobs(
    admin: Cli, release: Path, exchange: Path
) -> None:
    admin.ok("team", "create", "busy")
    running = admin.submit(
        "--team", "busy", "--gpus", "2", "--workdir", str(exchange), *hold(release)
    )
    wait_status(admin, running, {"running"})
    waiting = admin.submit("--team", "busy", "--gpus", "4", "--", "true")
    busy = _team(admin, "busy")
    assert (busy["usage"]["gpus"], busy["pending"]) == (2, 1)
    row = next(line for line in admin.ok("team").splitlines() if line.startswith("busy "))
    cells = row.split()  # busy - - 1 2 1 STORAGE... -
    assert (cells[4:6], cells[-1]) == (["2", "1"], "-")  # IN USE, PENDING, ADMINS (none yet)
    admin.ok("cancel", str(waiting))
    release.touch()
    wait_status(admin, running, FINAL)


# -- gpupool run: policy options -------------------------------------------------------------


def test_run_policy_options_reach_the_spec_and_show(admin: Cli) -> None:
    printed = admin.ok(
        "run",
        "-o",
        "json",
        "--gpus",
        "1",
        "--priority",
        "50",
        "--no-preemptible",
        "--gpu-type",
        "a100",
        "--gpu-type",
        "H100",
        "--max-runtime",
        "2h",
        "--grace-period",
        "60s",
        "--",
        "true",
    )
    job = json.loads(printed)
    spec = job["spec"]
    assert (spec["priority"], spec["preemptible"], spec["gpu_types"]) == (
        50,
        False,
        ["a100", "H100"],
    )
    assert (spec["max_runtime_seconds"], spec["grace_period_seconds"]) == (7200, 60)
    assert job["preemptible"] is False
    done = wait_status(admin, job["id"], FINAL)
    assert done["status"] == "succeeded"
    shown = admin.ok("show", str(job["id"]))
    assert "not preemptible, gpu types a100 or H100, max runtime 2h, grace 1m" in shown
    assert "checkpoint:" in shown


def test_run_durations_and_gpu_types_are_checked(admin: Cli) -> None:
    for args in (["--max-runtime", "soon"], ["--grace-period", "1h30m"], ["--max-runtime", "-5"]):
        result = admin("run", *args, "--", "true")
        assert result.returncode == 2 and "duration" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""
    missing = admin("run", "--gpus", "1", "--gpu-type", "H100", "--", "true")
    assert refused(missing, "unsatisfiable") and "H100" in missing.stderr
    assert refused(admin("run", "--max-runtime", "0", "--", "true"), "invalid_request")
    assert refused(admin("run", "--priority", "1001", "--", "true"), "invalid_request")


def test_a_member_is_held_to_the_member_priority(admin: Cli) -> None:
    admin.ok("users", "create", "pia", "--team", "default")
    pia = Cli(admin.url, admin.ok("tokens", "create", "--user", "pia").strip())
    high = pia("run", "--priority", "500", "--", "true")
    assert refused(high, "priority_not_allowed") and "-1000..100" in high.stderr
    job_id = pia.submit("--priority", "100", "--", "true")
    assert wait_status(pia, job_id, FINAL)["priority"] == 100


def _team(cli: Cli, name: str) -> dict:
    return next(team for team in cli.json("team") if team["name"] == name)


def test_the_nodes_network_is_asked_for_by_admins_only(admin: Cli) -> None:
    admin.ok("users", "create", "nia", "--team", "default")
    nia = Cli(admin.url, admin.ok("tokens", "create", "--user", "nia").strip())
    shared = nia("run", "--network", "host", "--", "true")
    assert refused(shared, "host_network_not_allowed") and "GPUPOOL_ALLOW_HOST_NETWORK" in (
        shared.stderr
    )
    assert nia("run", "--network", "isolated", "--", "true").returncode == 0
    assert admin("run", "--network", "host", "--", "true").returncode == 0
    spread = admin("run", "--nodes", "2", "--network", "isolated", "--", "true")
    assert refused(spread, "invalid_network")
