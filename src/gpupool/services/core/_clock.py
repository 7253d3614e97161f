"""The wall clock, injected where time matters so tests can replace it."""

from __future__ import annotations

import time


class SystemClock:
    def now(self) -> float:
        return time.time()
