"""Fixtures of the runner tests: each runs the real runner unsandboxed and in its sandbox."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from runner_harness import RunnerHarness, bwrap


@pytest.fixture(params=["direct", "sandbox"])
def harness(request: pytest.FixtureRequest) -> Iterator[RunnerHarness]:
    """A runner harness; ``sandbox``: spec.json asks for the job sandbox, as the server's
    executor writes it (as root, the job runs as ``nobody``)."""
    sandboxed = request.param == "sandbox"
    if sandboxed and bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    h = RunnerHarness(sandboxed=sandboxed)
    yield h
    h.cleanup()
    shutil.rmtree(h.root, ignore_errors=True)
