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
    about: Callable[[], object] | None = None,
) -> T:
    """Poll ``check`` until it returns something truthy, and return that; fail at ``timeout``
    (with what ``about`` says then: the state that explains the wait, for the failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            said = f"; {about()!r}" if about is not None else ""
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}; last: {value!r}{said}"
            )
        time.sleep(every)
