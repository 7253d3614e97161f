"""runner/paths.py: whether a path lies in (or above) another."""

from __future__ import annotations

from gpupool.runner.paths import conflict, within


def test_within_is_the_path_or_below_it() -> None:
    assert within("/data", "/data") and within("/data/jobs", "/data/")
    assert not within("/database", "/data")


def test_a_conflict_is_the_protected_path_in_or_above() -> None:
    assert conflict("/data/jobs/1", ["/data"]) == "/data"
    assert conflict("/", ["/data"]) == "/data"
    assert conflict("/", ["/data"], above_too=False) is None
    assert conflict("/home/ann", ["/data"]) is None
