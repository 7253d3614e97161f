"""The shape of ``gpupool.services``, read from the source with ``ast``.

``services/`` is one package per capability (``jobs``, ``identity``, ...), each with a public
face (its ``__init__``) and private modules (``_x``); ``core`` holds the ports they all use,
and above them ``platform`` holds the running server (``Platform``) that requests see. The
control pipelines (``gpupool.loops``) and the composition root (``gpupool.platform``) are
built on services, never the other way. Five rules keep that shape:

- outside a package, code imports only its public face, never one of its private modules;
- no import cycle, between capability packages or between modules of services;
- no capability package imports ``services.platform``;
- no module of services imports the loops or the composition root;
- no module of services makes a thread (or a pool of them): work in the background is a
  pipeline of ``gpupool.loops``, which calls the services' rules.

Every import counts, wherever it is written: inside a function or an ``if TYPE_CHECKING:``
block too (a cycle hidden behind an import in a function is still a cycle of dependencies).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gpupool

SOURCE = Path(gpupool.__file__).resolve().parent.parent  # the folder that holds gpupool/
SERVICES = "gpupool.services"
ABOVE = frozenset({f"{SERVICES}.platform"})  # built on every package
BUILT_ON_SERVICES = ("gpupool.loops", "gpupool.platform")  # services never import them
# what makes a thread, or a pool of threads or processes: never in services
THREADS = frozenset(
    {
        "threading.Thread",
        "threading.Timer",
        "concurrent.futures.ThreadPoolExecutor",
        "concurrent.futures.ProcessPoolExecutor",
        "multiprocessing.Process",
        "multiprocessing.Pool",
    }
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. gpupool.services.jobs._arrays
    target: str  # what it imports: a module, or a name in one (``from X import y``: X.y)
    line: int

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


# -- the rules, each a function of the source tree so that a fake tree can be checked too ----


def private_imports(root: Path) -> list[str]:
    """Imports of a package's private module (``gpupool.services.<pkg>._x``) from outside
    that package."""
    found: dict[str, None] = {}  # one line per statement and private module, in order
    for i in imports(root):
        private = private_module(i.target)
        if private is not None and not within(i.module, private.rpartition(".")[0]):
            found[f"{i.module}:{i.line} imports {private}"] = None
    return list(found)


def package_cycle(root: Path) -> list[str] | None:
    """A cycle of imports between capability packages, or None."""
    packages = capability_packages(root)
    edges: dict[str, set[str]] = {package: set() for package in packages}
    for i in service_imports(root):
        source, target = package_of(i.module, packages), package_of(i.target, packages)
        if source and target and source != target:
            edges[source].add(target)
    return find_cycle(edges)


def module_cycle(root: Path) -> list[str] | None:
    """A cycle of imports between modules of services, or None."""
    modules = {name for name in module_names(root) if within(name, SERVICES)}
    edges: dict[str, set[str]] = {module: set() for module in modules}
    for i in service_imports(root):
        target = i.target if i.target in modules else i.target.rpartition(".")[0]
        if target in modules and target != i.module:
            edges[i.module].add(target)
    return find_cycle(edges)


def imports_from_below(root: Path) -> list[str]:
    """Imports of ``services.platform`` by a capability package."""
    packages = capability_packages(root)
    return [
        i.where
        for i in service_imports(root)
        if package_of(i.module, packages) and any(within(i.target, top) for top in ABOVE)
    ]


def imports_of_the_loops(root: Path) -> list[str]:
    """Imports of the loops or the composition root by a module of services."""
    return [
        i.where
        for i in imports(root)
        if within(i.module, SERVICES) and any(within(i.target, top) for top in BUILT_ON_SERVICES)
    ]


def threads_made(root: Path) -> list[str]:
    """Where a module of services names what makes a thread (``THREADS``), however it was
    imported (``import threading``, ``from threading import Thread as T``, ...)."""
    found = []
    for path in sorted((root / "gpupool" / "services").rglob("*.py")):
        module = module_name(root, path)
        tree = ast.parse(path.read_text(), str(path))
        names = _imported_names(tree)
        made = {
            (node.lineno, name)
            for node in ast.walk(tree)
            if (name := _dotted(node, names)) in THREADS
        }
        found += [f"{module}:{line} makes a {name}" for line, name in sorted(made)]
    return found


def _imported_names(tree: ast.AST) -> dict[str, str]:
    """Each name a module binds by an import -> the dotted name it stands for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    """``a.b.c`` (a name, or attributes of one) with its first name as it was imported."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


# -- the real tree ----------------------------------------------------------------------------


def test_no_module_imports_a_private_module_of_another_package() -> None:
    found = private_imports(SOURCE)
    assert found == [], "private modules imported from outside their package:\n" + "\n".join(found)


def test_there_is_no_cycle_between_capability_packages() -> None:
    cycle = package_cycle(SOURCE)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle or ())


def test_there_is_no_cycle_between_modules_of_services() -> None:
    cycle = module_cycle(SOURCE)
    assert cycle is None, "modules import each other: " + " -> ".join(cycle or ())


def test_no_capability_imports_the_platform() -> None:
    found = imports_from_below(SOURCE)
    assert found == [], "capabilities that import services.platform:\n" + "\n".join(found)


def test_services_never_import_the_loops_or_the_composition_root() -> None:
    found = imports_of_the_loops(SOURCE)
    assert found == [], "services that import loops or gpupool.platform:\n" + "\n".join(found)


def test_no_module_of_services_makes_a_thread() -> None:
    found = threads_made(SOURCE)
    assert found == [], "services that make threads (a pipeline of loops/):\n" + "\n".join(found)


def test_services_is_packages_and_the_platform_above_them() -> None:
    """Nothing is left at the old flat paths: a module of services is in a package, or is
    ``services.platform``."""
    packages = capability_packages(SOURCE)
    loose = {
        name
        for name in module_names(SOURCE)
        if name.count(".") == 2 and within(name, SERVICES) and name not in {*ABOVE, *packages}
    }
    assert loose == set()
    assert {f"{SERVICES}.{name}" for name in ("core", "jobs", "identity", "cluster")} <= set(
        packages
    )


def test_each_package_exports_what_its_all_names() -> None:
    for package in capability_packages(SOURCE):
        face = importlib.import_module(package)
        names = getattr(face, "__all__", None)
        assert names, f"{package} has no __all__"
        missing = [name for name in names if not hasattr(face, name)]
        assert missing == [], f"{package}.__all__ names what it does not have: {missing}"
        assert not [name for name in names if name.startswith("_")]


# -- each rule fails on a deliberate violation ------------------------------------------------


def fake_tree(root: Path, files: dict[str, str]) -> Path:
    """A tiny gpupool/services tree under ``root``: a path -> its source."""
    for name in ("gpupool/__init__.py", "gpupool/services/__init__.py"):
        files.setdefault(name, "")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_private_import_from_outside_is_found(tmp_path: Path) -> None:
    root = fake_tree(
        tmp_path,
        {
            "gpupool/services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "gpupool/services/jobs/_jobs.py": "from gpupool.services.jobs._views import view\n",
            "gpupool/services/jobs/_views.py": "",
            "gpupool/api/routes.py": (
                "def later():\n    from gpupool.services.jobs._jobs import run\n"
            ),
            "gpupool/services/models/__init__.py": "from gpupool.services.jobs import _views\n",
        },
    )
    assert private_imports(root) == [
        "gpupool.api.routes:2 imports gpupool.services.jobs._jobs",
        "gpupool.services.models:1 imports gpupool.services.jobs._views",
    ]


def test_a_cycle_between_packages_is_found_in_a_function_or_type_checking(
    tmp_path: Path,
) -> None:
    root = fake_tree(
        tmp_path,
        {
            "gpupool/services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "gpupool/services/jobs/_jobs.py": "from gpupool.services import identity\n",
            "gpupool/services/identity/__init__.py": (
                "from gpupool.services.identity._users import u\n"
            ),
            "gpupool/services/identity/_users.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from gpupool.services.jobs import run\n"
            ),
        },
    )
    assert package_cycle(root) == [
        "gpupool.services.identity",
        "gpupool.services.jobs",
        "gpupool.services.identity",
    ]
    assert module_cycle(root) is not None


def test_a_cycle_between_modules_is_found(tmp_path: Path) -> None:
    """Inside one package too: a private module that imports its own package's face."""
    root = fake_tree(
        tmp_path,
        {
            "gpupool/services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "gpupool/services/jobs/_jobs.py": (
                "def run():\n    from gpupool.services.jobs import x\n"
            ),
        },
    )
    assert package_cycle(root) is None
    assert module_cycle(root) == [
        "gpupool.services.jobs",
        "gpupool.services.jobs._jobs",
        "gpupool.services.jobs",
    ]


def test_a_capability_that_imports_the_platform_is_found(tmp_path: Path) -> None:
    root = fake_tree(
        tmp_path,
        {
            "gpupool/services/platform.py": "from gpupool.services.jobs import run\n",
            "gpupool/services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "gpupool/services/jobs/_jobs.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from gpupool.services.platform import Platform\n"
                "def run():\n"
                "    from gpupool.services import platform\n"
            ),
        },
    )
    assert imports_from_below(root) == [
        "gpupool.services.jobs._jobs:3 imports gpupool.services.platform",
        "gpupool.services.jobs._jobs:3 imports gpupool.services.platform.Platform",
        "gpupool.services.jobs._jobs:5 imports gpupool.services.platform",
    ]
    assert module_cycle(root) is not None  # platform -> jobs -> platform


def test_services_that_import_the_loops_or_the_root_are_found(tmp_path: Path) -> None:
    root = fake_tree(
        tmp_path,
        {
            "gpupool/platform.py": "from gpupool.loops import Control\n",
            "gpupool/loops/__init__.py": "from gpupool.services.jobs import run\n",
            "gpupool/services/platform.py": "from gpupool.platform import open_platform\n",
            "gpupool/services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "gpupool/services/jobs/_jobs.py": (
                "def run():\n    from gpupool.loops.driver import Driver\n"
            ),
        },
    )
    assert imports_of_the_loops(root) == [
        "gpupool.services.jobs._jobs:2 imports gpupool.loops.driver",
        "gpupool.services.jobs._jobs:2 imports gpupool.loops.driver.Driver",
        "gpupool.services.platform:1 imports gpupool.platform",
        "gpupool.services.platform:1 imports gpupool.platform.open_platform",
    ]


def test_a_service_that_makes_a_thread_is_found(tmp_path: Path) -> None:
    root = fake_tree(
        tmp_path,
        {
            "gpupool/services/jobs/__init__.py": "import threading\n",
            "gpupool/services/jobs/_watch.py": (
                "import threading\n"
                "from concurrent.futures import ThreadPoolExecutor as Pool\n"
                "from threading import Timer\n"
                "lock = threading.Lock()\n"
                "thread = threading.Thread(target=print)\n"
                "pool = Pool(4)\n"
                "class Look(Timer):\n    pass\n"
            ),
            "gpupool/loops/watch.py": "import threading\nthreading.Thread(target=print)\n",
        },
    )
    assert threads_made(root) == [
        "gpupool.services.jobs._watch:5 makes a threading.Thread",
        "gpupool.services.jobs._watch:6 makes a concurrent.futures.ThreadPoolExecutor",
        "gpupool.services.jobs._watch:7 makes a threading.Timer",
    ]


def test_a_clean_fake_tree_passes(tmp_path: Path) -> None:
    root = fake_tree(
        tmp_path,
        {
            "gpupool/services/platform.py": "from gpupool.services import jobs\n",
            "gpupool/services/core/__init__.py": "from gpupool.services.core._clock import Clock\n",
            "gpupool/services/core/_clock.py": "",
            "gpupool/services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "gpupool/services/jobs/_jobs.py": (
                "import gpupool.services.jobs._views as views\n"
                "from gpupool.services.core import Clock\n"
            ),
            "gpupool/services/jobs/_views.py": "",
            "gpupool/api/routes.py": "from gpupool.services.jobs import run\n",
        },
    )
    assert private_imports(root) == []
    assert package_cycle(root) is None
    assert module_cycle(root) is None
    assert imports_from_below(root) == []
    assert threads_made(root) == []


# -- reading the source -----------------------------------------------------------------------


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def private_module(target: str) -> str | None:
    """The private module of services that ``target`` is or is in
    (``gpupool.services.jobs._arrays`` for it and anything in it), or None."""
    names = target.split(".")
    for index, name in enumerate(names):
        if index > 1 and name.startswith("_") and not name.startswith("__"):
            private = ".".join(names[: index + 1])
            return private if within(private, SERVICES) else None
    return None


def capability_packages(root: Path) -> list[str]:
    """The sub-packages of services: ``gpupool.services.jobs``, ..."""
    folder = root / "gpupool" / "services"
    return sorted(f"{SERVICES}.{path.parent.name}" for path in folder.glob("*/__init__.py"))


def package_of(module: str, packages: list[str]) -> str | None:
    return next((package for package in packages if within(module, package)), None)


def module_names(root: Path) -> set[str]:
    return {module_name(root, path) for path in (root / "gpupool").rglob("*.py")}


def module_name(root: Path, path: Path) -> str:
    names = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def service_imports(root: Path) -> Iterator[Import]:
    """Imports of services' modules by services' modules."""
    return (i for i in imports(root) if within(i.module, SERVICES) and within(i.target, SERVICES))


def imports(root: Path) -> Iterator[Import]:
    """Every import of a gpupool module by a gpupool module, wherever it is written."""
    for path in sorted((root / "gpupool").rglob("*.py")):
        module = module_name(root, path)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            for target in targets(node, module, path.name == "__init__.py"):
                if within(target, "gpupool"):
                    yield Import(module, target, node.lineno)


def targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """What one statement imports: modules, and for ``from X import y`` both X and X.y."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        anchor = here[: len(here) - (node.level - 1)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(edges):
        found = _cycle_from(start, edges, done, [])
        if found is not None:
            return found
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
