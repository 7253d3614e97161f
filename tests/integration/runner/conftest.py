"""Fixtures of the runner tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runner_harness import RunnerHarness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[RunnerHarness]:
    h = RunnerHarness(tmp_path)
    yield h
    h.cleanup()
