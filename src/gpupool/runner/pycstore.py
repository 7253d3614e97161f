"""Bytecode of an environment's packages, compiled once per node (stdlib only; run by the
environment's own python, as a script, inside its build's sandbox).

uv installs a package's files as hard links to its cache, so every environment with that
package has the very same source files (one inode each). Their bytecode is the same too: the
``.pyc`` of a source is kept once in a store keyed by the source's inode, modification time and
size (and the interpreter's cache tag), compiled the first time an environment needs it and
hard-linked into each environment's ``__pycache__`` after that. An environment that differs
from another in one package compiles that package alone, and its bytecode takes no more
disk. (The file name a ``.pyc`` records is the first environment's; Python replaces it with
the real source path when it loads the ``.pyc``.) A package's own test suite is not compiled:
it is most of the files of the big scientific packages, and only their test runs import it.

    python pycstore.py SITE_PACKAGES STORE
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
from concurrent.futures import ProcessPoolExecutor

CHUNK = 64  # sources per task of a worker
SKIPPED = ("tests", "test")  # a package's own test suite (below its top level)


def key_of(stat: os.stat_result) -> str:
    """A source file's identity: the same inode, unchanged, gives the same bytecode."""
    return f"{stat.st_dev:x}-{stat.st_ino:x}-{stat.st_mtime_ns:x}-{stat.st_size:x}"


def stored(store: str, key: str) -> str:
    tag = sys.implementation.cache_tag
    return os.path.join(store, tag, key[-2:], f"{key}.pyc")


def sources(site: str) -> list[str]:
    """The sources below ``site`` to compile: not a package's own tests (most of the files of
    numpy, scipy, pandas, scikit-learn; imported by their test runs alone, which then compile
    them in memory)."""
    found = []
    for directory, dirs, files in os.walk(site):
        nested = directory != site
        dirs[:] = [d for d in dirs if d != "__pycache__" and not (nested and d in SKIPPED)]
        found += [os.path.join(directory, name) for name in files if name.endswith(".py")]
    return found


def compile_into_store(pairs: list[tuple[str, str]]) -> list[str]:
    """Compile each (source, store path) missing from the store; the sources compiled."""
    done = []
    for source, target in pairs:
        if os.path.exists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        partial = f"{target}.{os.getpid()}.tmp"
        try:
            py_compile.compile(source, cfile=partial, doraise=True)
            os.chmod(partial, 0o444)
            os.replace(partial, target)
        except (py_compile.PyCompileError, SyntaxError, ValueError, OSError):
            # what compileall skips too: a test file of another Python's syntax
            if os.path.exists(partial):
                os.unlink(partial)
            continue
        done.append(source)
    return done


def link_all(site: str, store: str, workers: int) -> tuple[int, int]:
    """Give every source of ``site`` its bytecode from the store (compiling what is missing);
    (files linked, of which compiled now)."""
    wanted = []
    for source in sources(site):
        try:
            wanted.append((source, stored(store, key_of(os.stat(source)))))
        except OSError:
            continue
    missing = [pair for pair in wanted if not os.path.exists(pair[1])]
    compiled = 0
    if missing:
        chunks = [missing[i : i + CHUNK] for i in range(0, len(missing), CHUNK)]
        if workers > 1 and len(chunks) > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                compiled = sum(len(done) for done in pool.map(compile_into_store, chunks))
        else:
            compiled = sum(len(compile_into_store(chunk)) for chunk in chunks)
    linked = 0
    for source, target in wanted:
        if not os.path.exists(target):
            continue  # it did not compile
        cache = importlib.util.cache_from_source(source)
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        if os.path.lexists(cache):
            os.unlink(cache)
        os.link(target, cache)
        linked += 1
    return linked, compiled


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python pycstore.py SITE_PACKAGES STORE", file=sys.stderr)
        return 2
    site, store = argv
    linked, compiled = link_all(site, store, os.cpu_count() or 1)
    print(f"bytecode: {linked} files, {compiled} compiled now, {linked - compiled} shared")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
