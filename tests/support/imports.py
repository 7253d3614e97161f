"""Reading gpupool's imports from the source with ``ast``, for the tests of its shape
(``tests/unit/test_import_rules.py``, ``tests/unit/services/test_packages.py``).

Every import counts, wherever it is written: inside a function or under ``if TYPE_CHECKING:``
too (``Import.deferred`` says which). A rule is about what a module depends on, not about
when the import runs; and a cycle hidden behind an import inside a function is still two
modules that cannot be understood one without the other.

Everything here takes ``package``, the folder of a ``gpupool`` tree: the real one, or a fake
one that ``fake_package`` writes so that a test can show each kind of violation is caught.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. gpupool.api.routers.jobs
    target: str  # what it imports: a module, or a name in one (``from X import y``: X.y)
    line: int
    deferred: bool = False  # in a function or a TYPE_CHECKING block: not run on import

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def within(name: str, package: str) -> bool:
    """Whether ``name`` is ``package`` or something in it."""
    return name == package or name.startswith(package + ".")


# -- reading the source -----------------------------------------------------------------------


def imports(package: Path) -> Iterator[Import]:
    """Every import of a gpupool module by a module of ``package`` (a gpupool tree)."""
    for path in sorted(package.rglob("*.py")):
        yield from imports_of(path, module_name(path, package))


def module_name(path: Path, package: Path) -> str:
    """The dotted name of the module at ``path`` in ``package`` (``gpupool.api.ui``)."""
    names = ["gpupool", *path.relative_to(package).with_suffix("").parts]
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def module_names(package: Path) -> set[str]:
    """The dotted names of every module of ``package``."""
    return {module_name(path, package) for path in package.rglob("*.py")}


def imports_of(path: Path, module: str) -> Iterator[Import]:
    """The imports of gpupool that the module ``module``, read from ``path``, writes."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    deferred = {id(n) for block in ast.walk(tree) if _is_deferred(block) for n in ast.walk(block)}
    for node in ast.walk(tree):
        for target in _targets(node, module, is_package):
            if within(target, "gpupool"):
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


def graph(package: Path) -> dict[str, set[str]]:
    """Module -> the gpupool modules it imports, wherever the import is written (``from X
    import y`` counts X.y when X.y is a module, else X)."""
    modules = module_names(package)
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for found in imports(package):
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


# -- a fake tree ------------------------------------------------------------------------------


def fake_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``gpupool`` under ``root`` with these modules (path in the package -> its
    source), an ``__init__.py`` in every folder; returns the package's folder."""
    package = root / "gpupool"
    for name, source in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(package).parents:
            (package / parent / "__init__.py").touch()
        path.write_text(source)
    return package
