"""What `gpupool queue` prints, from API answers (no server)."""

from __future__ import annotations

import time

from gpupool.cli import queue


def test_queue_summary_says_when_only_the_first_jobs_are_listed() -> None:
    found = {"waiting": 700, "teams": [{"team": "a", "jobs": [{}] * 300}, {"jobs": [{}] * 200}]}
    assert queue.summary_text(found, None) == (
        "700 jobs waiting in 2 teams (the first 500 in queue order are shown)"
    )
    one = {"waiting": 1, "teams": [{"team": "a", "jobs": [{}]}]}
    assert queue.summary_text(one, None) == "1 job waiting in 1 team"
    assert queue.summary_text(one, "a") == "1 job of team a waiting"


def test_queue_eta_is_relative_and_a_dash_without_estimate() -> None:
    assert queue.relative_eta(None) == "-"
    assert queue.relative_eta(time.time() - 5) == "now"
    assert queue.relative_eta(time.time() + 12 * 60 + 30).startswith("in 12m")


def test_queue_message_is_cut_to_one_short_line() -> None:
    assert queue.short("a\n  b") == "a b"
    cut = queue.short("x" * 100, room=10)
    assert cut == "x" * 9 + "…"
