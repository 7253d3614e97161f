"""The thread every pipeline beside the control thread runs in (``loops.watch.Watch``): a
look that fails is logged and the watch goes on, a wake ends the rest at once, and a stop
ends the watch and its thread."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from gpupool.loops.watch import Watch


class Counting(Watch):
    """Counts its looks; the first one fails."""

    def __init__(self, interval: float, look_first: bool = True) -> None:
        super().__init__("gpupool-test-watch", "the test's things", interval, look_first)
        self.looks = 0
        self.looked = threading.Event()

    def tick(self) -> None:
        self.looks += 1
        self.looked.set()
        if self.looks == 1:
            raise OSError("the first look fails")


def test_a_failed_look_is_logged_and_the_watch_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    watch = Counting(interval=0.01)
    with caplog.at_level(logging.ERROR, logger="gpupool.loops.watch"):
        watch.start()
        try:
            deadline = time.monotonic() + 5.0
            while watch.looks < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            watch.stop()
    assert watch.looks >= 3
    assert "watching the test's things failed" in caplog.text
    assert not watch._thread.is_alive()


def test_a_wake_ends_the_rest_and_a_stop_ends_the_thread() -> None:
    watch = Counting(interval=3600.0, look_first=False)
    watch.start()
    try:
        watch.wake()  # the first rest (an hour) ends now
        assert watch.looked.wait(5.0)
    finally:
        watch.stop()
    assert watch.looks == 1
    assert not watch._thread.is_alive()
