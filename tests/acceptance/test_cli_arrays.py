"""Job arrays through the real `gpupool` CLI against a real server: one `run --array` call
queues them all, each task prints its own index, `ls` shows the array as one row, and
`cancel` ends one task or the whole array."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import FINAL, Cli, hold, refused, wait_for


def tasks(admin: Cli, array_id: int) -> list[dict]:
    return admin.json("ls", "--array", str(array_id), "--all")


def test_each_task_prints_its_index_and_no_more_than_two_run_at_once(admin: Cli) -> None:
    printed = admin("run", "--array", "0-3%2", "--", "sh", "-c", "echo $GPUPOOL_ARRAY_INDEX")
    assert printed.returncode == 0, printed.stderr
    array_id = int(printed.stdout.strip())
    assert f"array {array_id}: 4 tasks (0-3), at most 2 at once" in printed.stderr

    ended = wait_for(
        lambda: (found := tasks(admin, array_id)) and all(t["status"] in FINAL for t in found),
        what=f"array {array_id} to end",
    )
    found = tasks(admin, array_id)
    assert ended and [(t["array_index"], t["status"]) for t in found] == [
        (index, "succeeded") for index in range(4)
    ]
    for index in range(4):
        assert admin.ok("logs", f"{array_id}_{index}") == f"{index}\n"
    assert "0-3%2" in admin.ok("ls", "--all")  # the array, as one row: 12_[0-3%2]
    assert admin.ok("ls", "--array", str(array_id), "--all").count(f"{array_id}_") == 4


def test_ls_shows_the_array_as_one_row_and_cancel_ends_a_task_or_all(
    admin: Cli, release: Path
) -> None:
    held = hold(release)
    array_id = int(admin.ok("run", "--array", "0-3%1", "--workdir", str(release.parent), *held))
    wait_for(
        lambda: tasks(admin, array_id)[0]["status"] == "running",
        what=f"task {array_id}_0 to run",
    )
    listed = admin.ok("ls")
    assert f"{array_id}_[0-3%1]" in listed and "3 pending, 1 running" in listed

    def held_back() -> str | None:
        answer = admin.ok("why", f"{array_id}_2")
        return answer if "reason:     ArrayLimit" in answer else None

    answer = wait_for(held_back, what=f"task {array_id}_2 to wait for its array's limit")
    assert f"array {array_id} runs at most 1 of its tasks at once (%1)" in answer
    task_2 = tasks(admin, array_id)[2]["id"]
    assert answer.startswith(f"task {array_id}_2 (job {task_2}) pending: ")  # named as asked
    by_id = admin.ok("why", str(task_2))  # by its job id: still named as the array's task
    assert by_id.startswith(f"task {array_id}_2 (job {task_2}) pending: "), by_id
    assert f"task {array_id}_2 (job {task_2}) has not started" in admin("logs", str(task_2)).stderr
    not_started = admin("logs", f"{array_id}_2")
    assert not_started.returncode == 0 and not_started.stdout == ""
    assert f"task {array_id}_2 (job {task_2}) has not started yet (ArrayLimit: " in (
        not_started.stderr
    )

    assert admin.ok("cancel", f"{array_id}_3").strip() == f"task {array_id}_3: cancelled"
    assert admin.ok("cancel", str(array_id)).strip() == (
        f"array {array_id}: 3 tasks cancelled, 1 stopping"
    )
    wait_for(
        lambda: all(t["status"] == "cancelled" for t in tasks(admin, array_id)),
        what=f"every task of array {array_id} to be cancelled",
    )
    assert str(array_id) not in admin.ok("ls")


def test_a_malformed_array_is_refused_and_an_array_is_not_followed(admin: Cli) -> None:
    bad = admin("run", "--array", "5-2", "--", "true")
    assert refused(bad, "invalid_array") and "counts down" in bad.stderr
    follow = admin("run", "--array", "0-3", "--follow", "--", "true")
    assert follow.returncode == 2 and "--follow follows one job" in follow.stderr
    unknown = admin("show", "1_x")
    assert unknown.returncode == 2 and "12_7" in unknown.stderr
