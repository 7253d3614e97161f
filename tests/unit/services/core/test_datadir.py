"""The server's lock on its data directory (the real server is tested in acceptance)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpupool.errors import DataDirInUse
from gpupool.services.core import DataDirLock, current_holder
from gpupool.services.core._datadir import Holder


def test_one_holder_at_a_time_and_the_next_after_release(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = DataDirLock(data)
    first.acquire("http://127.0.0.1:8765")
    assert (data.stat().st_mode & 0o777, first.path.stat().st_mode & 0o777) == (0o700, 0o600)
    assert current_holder(data) == Holder(os.getpid(), "http://127.0.0.1:8765")
    with pytest.raises(DataDirInUse, match=f"another gpupool server \\(pid {os.getpid()}\\)"):
        DataDirLock(data).acquire("http://127.0.0.1:9000")
    first.release()
    assert current_holder(data) is None  # the file stays; nobody holds it
    second = DataDirLock(data)
    second.acquire("http://127.0.0.1:9000")
    assert current_holder(data) == Holder(os.getpid(), "http://127.0.0.1:9000")
    second.release()


def test_no_lock_file_no_holder(tmp_path: Path) -> None:
    assert current_holder(tmp_path) is None
