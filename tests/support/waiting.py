"""Polling with a deadline: tests wait for conditions, never for fixed times."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    timeout: float = 30.0,
    what: str = "condition",
    every: float = 0.01,
) -> T:
    """Poll ``check`` until it returns something truthy, and return that; fail at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {value!r}")
        time.sleep(every)
