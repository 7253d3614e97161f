"""The import rules of docs/design.md, read from the source with ``ast``: which part of
gpupool may import which, and no import cycles.

For the rules between parts every import counts, wherever it is written (inside a function
or an ``if TYPE_CHECKING:`` block too): a rule is about what a part depends on, not about when
the import runs. For cycles, the imports a module runs when it is imported count: not those
inside functions or ``if TYPE_CHECKING:`` blocks (a few modules of the scheduler and the
runner import each other that way, for types or at call time).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import gpupool

PACKAGE = Path(gpupool.__file__).resolve().parent

# part -> the parts it must not import (a part is the first name below gpupool: api, cli, ...)
FORBIDDEN: dict[str, frozenset[str]] = {
    "api": frozenset({"store", "scheduler"}),  # routers call services, which return views
    "scheduler": frozenset({"store", "executors", "api", "services"}),  # pure decisions
    "client": frozenset({"api", "services", "store"}),  # users' scripts import it alone
    "runner": frozenset({"store", "services"}),  # it outlives the server
}
# part -> the only parts it may import (besides itself and the top-level ``gpupool``)
ALLOWED: dict[str, frozenset[str]] = {
    "cli": frozenset({"client", "domain"}),  # the CLI talks to the server through the client
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. gpupool.api.routers.jobs
    target: str  # what it imports, e.g. gpupool.services.jobs
    line: int
    deferred: bool = False  # in a function or a TYPE_CHECKING block: not run on import

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def test_each_part_imports_only_what_the_design_allows() -> None:
    broken = [i.where for i in imports() if not allowed(part(i.module), part(i.target))]
    assert not broken, "imports that break docs/design.md's rules:\n" + "\n".join(broken)


def test_api_imports_neither_store_nor_scheduler() -> None:
    """Named on its own: the rule the routers' refactor (issue 15) was for."""
    found = [
        i.where
        for i in imports()
        if part(i.module) == "api" and part(i.target) in {"store", "scheduler"}
    ]
    assert found == []


def test_there_is_no_import_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "an import cycle: " + " -> ".join(cycle or ())


@pytest.mark.parametrize(
    ("importer", "target", "expected"),
    [
        ("api", "store", False),
        ("api", "services", True),
        ("scheduler", "services", False),
        ("scheduler", "domain", True),
        ("cli", "client", True),
        ("cli", "services", False),
        ("cli", "settings", False),
        ("client", "api", False),
        ("runner", "store", False),
        ("services", "store", True),
    ],
)
def test_the_rules_read_as_the_design_says(importer: str, target: str, expected: bool) -> None:
    assert allowed(importer, target) is expected


def test_imports_are_found_wherever_they_are_written(tmp_path: Path) -> None:
    source = tmp_path / "example.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import gpupool.store.db\n"
        "from gpupool import scheduler\n"
        "from . import deps\n"
        "if TYPE_CHECKING:\n"
        "    from gpupool.services.platform import Platform\n"
        "def later():\n"
        "    from ..store import models\n"
    )
    found = {i.target for i in imports_of(source, "gpupool.api.routers.example")}
    assert found == {
        "gpupool.store.db",
        "gpupool",
        "gpupool.scheduler",
        "gpupool.api.routers",
        "gpupool.api.routers.deps",
        "gpupool.services.platform",
        "gpupool.services.platform.Platform",
        "gpupool.api.store",  # relative: two levels up from gpupool.api.routers.example
        "gpupool.api.store.models",
    }
    deferred = {i.target for i in imports_of(source, "gpupool.api.routers.example") if i.deferred}
    assert deferred == {
        "gpupool.services.platform",
        "gpupool.services.platform.Platform",
        "gpupool.api.store",
        "gpupool.api.store.models",
    }


def test_a_cycle_is_found() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


# -- reading the source ---------------------------------------------------------------------


def allowed(importer: str, target: str) -> bool:
    """Whether a module of part ``importer`` may import one of part ``target``."""
    if target in ("", importer):
        return True
    if importer in ALLOWED:
        return target in ALLOWED[importer]
    return target not in FORBIDDEN.get(importer, frozenset())


def part(module: str) -> str:
    """The part of gpupool a module belongs to (``gpupool.api.ui`` -> ``api``); '' for the
    package itself."""
    names = module.split(".")
    return names[1] if len(names) > 1 else ""


def imports() -> Iterator[Import]:
    """Every import of a gpupool module by a gpupool module."""
    for path in sorted(PACKAGE.rglob("*.py")):
        yield from imports_of(path, module_name(path))


def module_name(path: Path) -> str:
    names = ["gpupool", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def imports_of(path: Path, module: str) -> Iterator[Import]:
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    deferred = {id(n) for block in ast.walk(tree) if _is_deferred(block) for n in ast.walk(block)}
    for node in ast.walk(tree):
        for target in _targets(node, module, is_package):
            if target == "gpupool" or target.startswith("gpupool."):
                yield Import(module, target, node.lineno, id(node) in deferred)


def _is_deferred(node: ast.AST) -> bool:
    """A block whose imports do not run when its module is imported."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return True
    test = node.test if isinstance(node, ast.If) else None
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """What one statement imports: modules, and for ``from X import y`` both X and X.y (y
    may be a module: ``from gpupool import store``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = _resolve(node, module, is_package)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name of a ``from`` import's module (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    here = module.split(".") if is_package else module.split(".")[:-1]
    anchor = here[: len(here) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


# -- cycles -----------------------------------------------------------------------------------


def graph() -> dict[str, set[str]]:
    """Module -> the gpupool modules it imports when it is imported (``from X import y``
    counts X.y only when X.y is a module, else X)."""
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for found in (i for i in imports() if not i.deferred):
        target = found.target if found.target in modules else found.target.rpartition(".")[0]
        if target in modules and target != found.module:
            edges[found.module].add(target)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(edges):
        path = _cycle_from(start, edges, done, [])
        if path is not None:
            return path
    return None


def _cycle_from(
    node: str, edges: dict[str, set[str]], done: set[str], path: list[str]
) -> list[str] | None:
    if node in path:
        return [*path[path.index(node) :], node]
    if node in done:
        return None
    for target in sorted(edges.get(node, ())):
        found = _cycle_from(target, edges, done, [*path, node])
        if found is not None:
            return found
    done.add(node)
    return None
