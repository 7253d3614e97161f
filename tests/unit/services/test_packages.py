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
Reading the imports, their graph and its cycles is ``tests/support/imports.py``, shared with
the import rules of the whole package (``tests/unit/test_import_rules.py``).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import gpupool
from tests.support.imports import (
    Import,
    fake_package,
    find_cycle,
    graph,
    imports,
    module_name,
    module_names,
    within,
)

PACKAGE = Path(gpupool.__file__).resolve().parent
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


# -- the rules, each a function of the source tree so that a fake tree can be checked too ----


def private_imports(package: Path) -> list[str]:
    """Imports of a package's private module (``gpupool.services.<pkg>._x``) from outside
    that package."""
    found: dict[str, None] = {}  # one line per statement and private module, in order
    for i in imports(package):
        private = private_module(i.target)
        if private is not None and not within(i.module, private.rpartition(".")[0]):
            found[f"{i.module}:{i.line} imports {private}"] = None
    return list(found)


def package_cycle(package: Path) -> list[str] | None:
    """A cycle of imports between capability packages, or None."""
    packages = capability_packages(package)
    edges: dict[str, set[str]] = {name: set() for name in packages}
    for i in service_imports(package):
        source, target = package_of(i.module, packages), package_of(i.target, packages)
        if source and target and source != target:
            edges[source].add(target)
    return find_cycle(edges)


def module_cycle(package: Path) -> list[str] | None:
    """A cycle of imports between modules of services, or None."""
    edges = {
        module: {target for target in targets if within(target, SERVICES)}
        for module, targets in graph(package).items()
        if within(module, SERVICES)
    }
    return find_cycle(edges)


def imports_from_below(package: Path) -> list[str]:
    """Imports of ``services.platform`` by a capability package."""
    packages = capability_packages(package)
    return [
        i.where
        for i in service_imports(package)
        if package_of(i.module, packages) and any(within(i.target, top) for top in ABOVE)
    ]


def imports_of_the_loops(package: Path) -> list[str]:
    """Imports of the loops or the composition root by a module of services."""
    return [
        i.where
        for i in imports(package)
        if within(i.module, SERVICES) and any(within(i.target, top) for top in BUILT_ON_SERVICES)
    ]


def threads_made(package: Path) -> list[str]:
    """Where a module of services names what makes a thread (``THREADS``), however it was
    imported (``import threading``, ``from threading import Thread as T``, ...)."""
    found = []
    for path in sorted((package / "services").rglob("*.py")):
        module = module_name(path, package)
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
    found = private_imports(PACKAGE)
    assert found == [], "private modules imported from outside their package:\n" + "\n".join(found)


def test_there_is_no_cycle_between_capability_packages() -> None:
    cycle = package_cycle(PACKAGE)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle or ())


def test_there_is_no_cycle_between_modules_of_services() -> None:
    cycle = module_cycle(PACKAGE)
    assert cycle is None, "modules import each other: " + " -> ".join(cycle or ())


def test_no_capability_imports_the_platform() -> None:
    found = imports_from_below(PACKAGE)
    assert found == [], "capabilities that import services.platform:\n" + "\n".join(found)


def test_services_never_import_the_loops_or_the_composition_root() -> None:
    found = imports_of_the_loops(PACKAGE)
    assert found == [], "services that import loops or gpupool.platform:\n" + "\n".join(found)


def test_no_module_of_services_makes_a_thread() -> None:
    found = threads_made(PACKAGE)
    assert found == [], "services that make threads (a pipeline of loops/):\n" + "\n".join(found)


def test_services_is_packages_and_the_platform_above_them() -> None:
    """Nothing is left at the old flat paths: a module of services is in a package, or is
    ``services.platform``."""
    packages = capability_packages(PACKAGE)
    loose = {
        name
        for name in module_names(PACKAGE)
        if name.count(".") == 2 and within(name, SERVICES) and name not in {*ABOVE, *packages}
    }
    assert loose == set()
    assert {f"{SERVICES}.{name}" for name in ("core", "jobs", "identity", "cluster")} <= set(
        packages
    )


def test_each_package_exports_what_its_all_names() -> None:
    for package in capability_packages(PACKAGE):
        face = importlib.import_module(package)
        names = getattr(face, "__all__", None)
        assert names, f"{package} has no __all__"
        missing = [name for name in names if not hasattr(face, name)]
        assert missing == [], f"{package}.__all__ names what it does not have: {missing}"
        assert not [name for name in names if name.startswith("_")]


# -- each rule fails on a deliberate violation ------------------------------------------------


def test_a_private_import_from_outside_is_found(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "services/jobs/_jobs.py": "from gpupool.services.jobs._views import view\n",
            "services/jobs/_views.py": "",
            "api/routes.py": "def later():\n    from gpupool.services.jobs._jobs import run\n",
            "services/models/__init__.py": "from gpupool.services.jobs import _views\n",
        },
    )
    assert private_imports(package) == [
        "gpupool.api.routes:2 imports gpupool.services.jobs._jobs",
        "gpupool.services.models:1 imports gpupool.services.jobs._views",
    ]


def test_a_cycle_between_packages_is_found_in_a_function_or_type_checking(
    tmp_path: Path,
) -> None:
    package = fake_package(
        tmp_path,
        {
            "services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "services/jobs/_jobs.py": "from gpupool.services import identity\n",
            "services/identity/__init__.py": "from gpupool.services.identity._users import u\n",
            "services/identity/_users.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from gpupool.services.jobs import run\n"
            ),
        },
    )
    assert package_cycle(package) == [
        "gpupool.services.identity",
        "gpupool.services.jobs",
        "gpupool.services.identity",
    ]
    assert module_cycle(package) is not None


def test_a_cycle_between_modules_is_found(tmp_path: Path) -> None:
    """Inside one package too: a private module that imports its own package's face."""
    package = fake_package(
        tmp_path,
        {
            "services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "services/jobs/_jobs.py": "def run():\n    from gpupool.services.jobs import x\n",
        },
    )
    assert package_cycle(package) is None
    assert module_cycle(package) == [
        "gpupool.services.jobs",
        "gpupool.services.jobs._jobs",
        "gpupool.services.jobs",
    ]


def test_a_capability_that_imports_the_platform_is_found(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "services/platform.py": "from gpupool.services.jobs import run\n",
            "services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "services/jobs/_jobs.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from gpupool.services.platform import Platform\n"
                "def run():\n"
                "    from gpupool.services import platform\n"
            ),
        },
    )
    assert imports_from_below(package) == [
        "gpupool.services.jobs._jobs:3 imports gpupool.services.platform",
        "gpupool.services.jobs._jobs:3 imports gpupool.services.platform.Platform",
        "gpupool.services.jobs._jobs:5 imports gpupool.services.platform",
    ]
    assert module_cycle(package) is not None  # platform -> jobs -> platform


def test_services_that_import_the_loops_or_the_root_are_found(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "platform.py": "from gpupool.loops import Control\n",
            "loops/__init__.py": "from gpupool.services.jobs import run\n",
            "services/platform.py": "from gpupool.platform import open_platform\n",
            "services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "services/jobs/_jobs.py": "def run():\n    from gpupool.loops.driver import Driver\n",
        },
    )
    assert imports_of_the_loops(package) == [
        "gpupool.services.jobs._jobs:2 imports gpupool.loops.driver",
        "gpupool.services.jobs._jobs:2 imports gpupool.loops.driver.Driver",
        "gpupool.services.platform:1 imports gpupool.platform",
        "gpupool.services.platform:1 imports gpupool.platform.open_platform",
    ]


def test_a_service_that_makes_a_thread_is_found(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "services/jobs/__init__.py": "import threading\n",
            "services/jobs/_watch.py": (
                "import threading\n"
                "from concurrent.futures import ThreadPoolExecutor as Pool\n"
                "from threading import Timer\n"
                "lock = threading.Lock()\n"
                "thread = threading.Thread(target=print)\n"
                "pool = Pool(4)\n"
                "class Look(Timer):\n    pass\n"
            ),
            "loops/watch.py": "import threading\nthreading.Thread(target=print)\n",
        },
    )
    assert threads_made(package) == [
        "gpupool.services.jobs._watch:5 makes a threading.Thread",
        "gpupool.services.jobs._watch:6 makes a concurrent.futures.ThreadPoolExecutor",
        "gpupool.services.jobs._watch:7 makes a threading.Timer",
    ]


def test_a_clean_fake_tree_passes(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "services/platform.py": "from gpupool.services import jobs\n",
            "services/core/__init__.py": "from gpupool.services.core._clock import Clock\n",
            "services/core/_clock.py": "",
            "services/jobs/__init__.py": "from gpupool.services.jobs._jobs import run\n",
            "services/jobs/_jobs.py": (
                "import gpupool.services.jobs._views as views\n"
                "from gpupool.services.core import Clock\n"
            ),
            "services/jobs/_views.py": "",
            "api/routes.py": "from gpupool.services.jobs import run\n",
        },
    )
    assert private_imports(package) == []
    assert package_cycle(package) is None
    assert module_cycle(package) is None
    assert imports_from_below(package) == []
    assert threads_made(package) == []


# -- the parts of services --------------------------------------------------------------------


def private_module(target: str) -> str | None:
    """The private module of services that ``target`` is or is in
    (``gpupool.services.jobs._arrays`` for it and anything in it), or None."""
    names = target.split(".")
    for index, name in enumerate(names):
        if index > 1 and name.startswith("_") and not name.startswith("__"):
            private = ".".join(names[: index + 1])
            return private if within(private, SERVICES) else None
    return None


def capability_packages(package: Path) -> list[str]:
    """The sub-packages of services: ``gpupool.services.jobs``, ..."""
    folder = package / "services"
    return sorted(f"{SERVICES}.{path.parent.name}" for path in folder.glob("*/__init__.py"))


def package_of(module: str, packages: list[str]) -> str | None:
    return next((package for package in packages if within(module, package)), None)


def service_imports(package: Path) -> Iterator[Import]:
    """Imports of services' modules by services' modules."""
    return (
        i for i in imports(package) if within(i.module, SERVICES) and within(i.target, SERVICES)
    )
