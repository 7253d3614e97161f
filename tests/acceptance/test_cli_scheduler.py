"""The scheduler's live settings through the real CLI against a real server: `gpupool scheduler
config` shows them, an admin's `set` makes a version (durations with units, the LAS levels as
GPU-time), `history` says what each changed and why, `rollback` goes back; a member reads them
but is refused a change; a wrong knob is a usage error naming the knobs."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import Cli, refused, wait_for


def test_an_admin_changes_reads_the_history_of_and_rolls_back_the_settings(admin: Cli) -> None:
    first = admin.ok("scheduler", "config")
    assert "version 0" in first and "las_thresholds" in first and "30m, 10h, 100h GPU" in first

    changed = admin.ok(
        "scheduler", "set", "las_thresholds=1h,20h,200h", "min_runtime=10m",
        "--reason", "fewer preemptions of mid-sized jobs",
    )  # fmt: skip

    assert "version 1" in changed and "1h, 20h, 200h GPU" in changed
    assert "changed: las_thresholds, min_runtime" in changed
    shown = admin.json("scheduler", "config")
    assert shown["knobs"]["las_thresholds"] == [3600.0, 72000.0, 720000.0]
    assert shown["knobs"]["min_runtime"] == 600.0
    admin.ok("scheduler", "set", "packing=best-fit", "--reason", "try it", "--if-version", "1")
    stale = admin("scheduler", "set", "packing=fgd", "--reason", "x", "--if-version", "1")
    assert refused(stale, "settings_changed"), stale.stderr

    history = admin.ok("scheduler", "history")
    assert "fewer preemptions of mid-sized jobs" in history and "packing=best-fit" in history
    assert [v["version"] for v in admin.json("scheduler", "history")] == [2, 1]
    back = admin.ok("scheduler", "rollback", "0", "--reason", "back to the defaults")
    assert "version 3" in back and "rollback" in back
    assert admin.json("scheduler", "config")["knobs"]["packing"] == "fgd"


def test_a_member_reads_the_settings_but_may_not_change_them(admin: Cli) -> None:
    admin.ok("users", "create", "sam", "--team", "default")
    sam = Cli(admin.url, admin.ok("tokens", "create", "--user", "sam").strip())
    assert "las_thresholds" in sam.ok("scheduler", "config")
    assert refused(sam("scheduler", "set", "min_runtime=1h", "--reason", "mine first"), "forbidden")
    assert refused(sam("scheduler", "history"), "forbidden")
    assert refused(sam("scheduler", "tune", "--trials", "1"), "forbidden")
    assert refused(sam("history", "export"), "forbidden")
    assert refused(sam("scheduler", "rollback", "0", "--reason", "x"), "forbidden")


def test_a_wrong_knob_or_value_is_a_usage_error_that_names_the_knobs(admin: Cli) -> None:
    wrong = admin("scheduler", "set", "levels=1h", "--reason", "x")
    assert wrong.returncode == 2 and "las_thresholds" in wrong.stderr
    bad = admin("scheduler", "set", "min_runtime=soon", "--reason", "x")
    assert bad.returncode == 2 and "30m" in bad.stderr  # how to write a duration
    down = admin("scheduler", "set", "las_thresholds=10h,1h", "--reason", "x")
    assert refused(down, "invalid_request") and "lowest first" in down.stderr


def test_the_history_is_exported_replayed_and_tuned_from_the_cli(
    admin: Cli, tmp_path: Path
) -> None:
    for seconds in ("0.3", "0.5"):
        job_id = admin.submit("--gpus", "1", "--", "sleep", seconds)
        wait_for(lambda j=job_id: admin.job(j)["status"] == "succeeded", what="a job to end")
    trace = tmp_path / "trace.csv"

    said = admin.ok("history", "export", "--since", "1h", "-o", str(trace))

    assert "jobs written" in said
    header, *rows = trace.read_text().splitlines()
    assert header.startswith("submit,duration,gpus,team,user") and len(rows) >= 2
    simulated = admin.ok("simulate", "--trace", f"csv:{trace}", "--cluster", "1x4")
    assert "avg" in simulated.lower() or "jct" in simulated.lower()
    replayed = admin.ok("scheduler", "fidelity", "--since", "1h")
    assert "jobs that ended compared" in replayed and "median JCT error" in replayed

    before = admin.json("scheduler", "config")["version"]
    tuned = admin.ok("scheduler", "tune", "--window", "3h", "--holdout", "1h", "--trials", "2")
    assert "tuning" in tuned and ("keep" in tuned or "refuse" in tuned or "adopt" in tuned)
    listed = admin.json("scheduler", "tunes")
    assert listed[0]["status"] == "succeeded" and listed[0]["options"]["apply"] is False
    assert admin.json("scheduler", "config")["version"] == before, "a dry run changes nothing"
    wrong = admin("scheduler", "tune", "--guard", "latency=5%")
    assert wrong.returncode == 2 and "p95_wait" in wrong.stderr
    short = admin("scheduler", "tune", "--window", "1d", "--holdout", "2d")
    assert refused(short, "invalid_request") and "shorter than the window" in short.stderr
