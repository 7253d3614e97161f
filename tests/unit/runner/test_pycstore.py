"""Bytecode compiled once per source file on a node: two environments whose packages are the
same files (hard links, as uv installs them) share their .pyc files; a changed file compiles
anew; a file of another Python's syntax is skipped, as compileall skips it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from gpupool.runner.pycstore import link_all


def site(root: Path, name: str) -> Path:
    path = root / name / "site-packages"
    (path / "pkg").mkdir(parents=True)
    return path


def test_environments_of_the_same_files_share_their_bytecode(tmp_path: Path) -> None:
    store = tmp_path / "store"
    one, two = site(tmp_path, "one"), site(tmp_path, "two")
    (one / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (one / "pkg" / "old.py").write_text("print 'python 2'\n")
    os.link(one / "pkg" / "__init__.py", two / "pkg" / "__init__.py")  # as uv links them
    (two / "pkg" / "extra.py").write_text("EXTRA = 2\n")
    (one / "pkg" / "tests").mkdir()
    (one / "pkg" / "tests" / "test_pkg.py").write_text("def test(): pass\n")  # not compiled

    assert link_all(str(one), str(store), workers=1) == (1, 1)
    assert link_all(str(two), str(store), workers=2) == (2, 1)  # only extra.py is new

    first = Path(importlib.util.cache_from_source(str(one / "pkg" / "__init__.py")))
    second = Path(importlib.util.cache_from_source(str(two / "pkg" / "__init__.py")))
    assert first.stat().st_ino == second.stat().st_ino
    assert not first.stat().st_mode & 0o222
    assert not Path(importlib.util.cache_from_source(str(one / "pkg" / "old.py"))).exists()

    (two / "pkg" / "__init__.py").unlink()
    (two / "pkg" / "__init__.py").write_text("VALUE = 3\n")  # another file now
    assert link_all(str(two), str(store), workers=1) == (2, 1)
    assert Path(
        importlib.util.cache_from_source(str(two / "pkg" / "__init__.py"))
    ).stat().st_ino != (first.stat().st_ino)
