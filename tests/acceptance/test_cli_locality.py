"""Locality as a user meets it, from the real CLI against a real server: a job's placement
says what its node held of the dataset it reads and what it fetched (events, ``show``'s
placement), and so does ``why`` while it runs."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.test_cli_datasets import ended
from tests.support.cli import Cli, wait_for
from tests.support.server import ServerProcess


def test_a_job_is_told_its_node_held_the_dataset_a_job_before_it_fetched(
    pool: ServerProcess, admin: Cli, tmp_path: Path
) -> None:
    (tmp_path / "shard.txt").write_text("0123456789\n")
    admin.ok("dataset", "create", "shards", "--from", str(tmp_path / "shard.txt"))

    first = admin.submit("--dataset", "shards", "--", "true")
    assert ended(pool, first) == "succeeded", admin.ok("logs", str(first))
    node = admin.job(first)["placement"]["node"]
    placed = [e["message"] for e in admin.job(first)["events"] if e["reason"] == "Placed"]
    assert placed[0].endswith(f"{node} fetches its dataset shards:1"), placed

    second = admin.submit("--dataset", "shards", "--", "sleep", "60")

    def running() -> str | None:
        why = admin.json("why", str(second))
        return why["summary"] if admin.job(second)["status"] == "running" else None

    summary = wait_for(running, what=f"job {second} to run")
    assert summary == (
        f"it is running on {node}: it does not wait any more; {node} held its dataset shards:1"
    )
    shown = admin.job(second)
    placed = [e["message"] for e in shown["events"] if e["reason"] == "Placed"]
    assert placed[0].endswith(f"; {node} held its dataset shards:1"), placed
    manifest = shown["spec"]["datasets"][0]["manifest"]
    assert shown["placement"]["held"] == [f"dataset:{manifest}"]
    assert admin.job(first)["placement"]["held"] == []
    admin.ok("cancel", str(second))
