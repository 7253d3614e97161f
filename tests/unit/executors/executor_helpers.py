"""Helpers for the executor tests: workloads, waiting, and killing what a test left behind."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypeVar

import psutil

from gpupool.executors.base import Executor, Handle
from gpupool.executors.task import Observed, PollResult
from tests.support.cleanup import kill_leftovers  # noqa: F401 - used by the tests through here
from tests.support.waiting import wait_for  # noqa: F401 - used by the tests through here

T = TypeVar("T")


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_until_file(path: Path) -> list[str]:
    """A workload that prints 'ready', waits for ``path`` and exits with its content."""
    code = (
        "import os, sys, time\n"
        "print('ready', flush=True)\n"
        f"while not os.path.exists({str(path)!r}):\n"
        "    time.sleep(0.01)\n"
        f"sys.exit(int(open({str(path)!r}).read() or 0))\n"
    )
    return py(code)


def wait_observed(
    executor: Executor, handle: Handle, observed: Observed, timeout: float = 30.0
) -> PollResult:
    """Poll until the attempt is observed in ``observed``; fail on a different end state."""
    seen: list[PollResult] = []

    def check() -> PollResult | None:
        result = executor.poll(handle)
        seen.append(result)
        if result.observed == observed:
            return result
        ended = result.observed in (Observed.EXITED, Observed.LOST)
        assert not ended, f"wanted {observed}, got {result}"
        return None

    return wait_for(check, timeout, what=f"{observed} (last: {seen[-1:]})")


def is_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
