"""The first start's login line names a gpupool the user can run: `gpupool` when that is on
PATH, else the full path of the one the server runs from (`make serve` does not activate
.venv)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.server import ServerProcess

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("on_path", [False, True])
def test_the_login_line_names_a_gpupool_that_runs(tmp_path: Path, on_path: bool) -> None:
    if not (BIN / "gpupool").is_file():
        pytest.skip(f"no gpupool command beside {sys.executable} (not installed in a venv)")
    others = [p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != BIN]
    path = os.pathsep.join([str(BIN), *others] if on_path else others)
    server = ServerProcess(tmp_path / "data", env={"PATH": path}).start()
    try:
        line = next(x for x in server.output().splitlines() if x.startswith("CLI:"))
    finally:
        server.stop()
    command = "gpupool" if on_path else str(BIN.absolute() / "gpupool")
    assert re.fullmatch(rf"CLI: +{re.escape(command)} login {server.url} --token \S+", line)
