"""The import rules of DESIGN.md and docs/design.md, read from the source with ``ast``: which
part of gpupool may import which, and no import cycles.

A part is the first name below ``gpupool`` (``api``, ``services``, ``settings``...). Each part
has an allow-list (``ALLOWED``): the parts it may import, straight from DESIGN's one-way
arrows; an import that no list allows fails, whether it breaks a "never" of the design or is
merely not in its arrows (an arrow back up). ``NEVER`` is DESIGN's list of what must not be,
checked against the allow-lists so that the two cannot drift apart.

Every import counts, wherever it is written: inside a function or under ``if TYPE_CHECKING:``
too, for the rules and for cycles alike. A rule is about what a part depends on, not about
when the import runs; and a cycle hidden behind an import inside a function is still two
modules that cannot be understood one without the other.

The tests at the end build a small fake package in a temporary directory and run the same
checks on it, to show that each kind of violation is caught. Reading the imports, their graph
and its cycles is ``tests/support/imports.py``, shared with the tests of services' shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

import gpupool
from tests.support.imports import (
    Import,
    fake_package,
    find_cycle,
    graph,
    imports,
    imports_of,
    module_name,
)

PACKAGE = Path(gpupool.__file__).resolve().parent

# What most parts may import: the package itself (``gpupool.__version__``) and the domain
# models (DESIGN: everything may import domain). ``errors`` (the error classes, importing
# nothing) and ``settings`` (the one typed Settings, importing only domain and errors) sit
# just above domain, for the server's parts.
BASE = frozenset({"", "domain"})
SERVER_SIDE = BASE | {"errors", "settings"}

# part -> every part it may import besides itself (DESIGN.md, "Imports point one way"; the
# comments say where a line goes beyond DESIGN's arrows, and why)
ALLOWED: dict[str, frozenset[str]] = {
    # the foundations
    "errors": frozenset({""}),
    "domain": BASE | {"errors"},
    "settings": BASE | {"errors"},  # never the scheduler: every process loads the settings
    "metrics": frozenset({""}),  # gpupool.metrics.log, imported by jobs: standard library only
    "serving": frozenset({""}),  # the model server a replica runs: no server code
    # the server's parts, bottom up
    "store": SERVER_SIDE,
    "scheduler": BASE | {"errors"},  # pure decisions
    "sim": BASE | {"errors", "scheduler"},
    "discovery": SERVER_SIDE,
    "runner": BASE,  # the standard library and domain; it outlives the server
    "executors": SERVER_SIDE | {"runner", "discovery"},  # launchers: domain.launchers
    # cluster -> executors, and what they stand on; a joining node talks to the server
    # through the client, as any other program would
    "cluster": SERVER_SIDE | {"executors", "runner", "discovery", "client"},
    # proxy -> the ways to a workload: the runner's socket, on a pool's nodes the cluster's
    # relay; it never reads the database nor knows a capability (they publish into it)
    "proxy": SERVER_SIDE | {"cluster", "runner"},
    # services -> {store, scheduler, executors, sim, discovery}; and the cluster capability
    # builds the Ray executor (cluster), jobs read the runner's notes; notebooks and
    # deployments publish their routes into the proxy's table
    "services": SERVER_SIDE
    | {"store", "scheduler", "executors", "sim", "discovery", "cluster", "runner", "proxy"},
    # loops -> services, and what the pipelines drive and record: the database (Core
    # statements on the hot path), the pure scheduler, the executor port; the Ray pool's
    # node and head watches drive the bridge and the head (cluster); this node's is
    # discovered again (discovery); health checks reach workloads the proxy's way (proxy)
    "loops": SERVER_SIDE
    | {"services", "store", "scheduler", "executors", "cluster", "discovery", "proxy"},
    "api": SERVER_SIDE | {"services", "proxy"},
    # what users run
    "client": BASE,  # users' scripts import it alone
    "cli": BASE | {"client"},
    # the composition roots: they build everything, and nothing imports them
    "server": frozenset({"*"}),
    "platform": frozenset({"*"}),  # opens the Platform: builds services and loops together
    "main": frozenset({"", "cli"}),
    "__main__": frozenset({"main"}),
}

# DESIGN's "never": importer part -> parts it must not import
NEVER: dict[str, frozenset[str]] = {
    "scheduler": frozenset({"store", "executors", "api", "services", "cluster"}),
    "sim": frozenset({"cluster", "store", "executors"}),
    "executors": frozenset({"cluster", "services", "api", "scheduler", "store"}),
    "api": frozenset({"store", "scheduler"}),  # routers call services, which return views
    "cli": frozenset({"services", "store", "settings", "api"}),
    "client": frozenset({"api", "services", "store"}),
    "runner": frozenset({"store", "services", "executors", "cluster"}),
    "settings": frozenset({"scheduler"}),
    "domain": frozenset({"store", "scheduler", "executors", "services", "api", "settings"}),
    "metrics": frozenset({"domain", "settings", "errors"}),
}

# Modules allowed a part that their own part may not import, each for a stated reason; an
# entry that no longer matches an import fails too, so that it goes when the import goes.
# (importing module, imported part) -> why
EXCEPTIONS: dict[tuple[str, str], str] = {}


# -- the rules on gpupool ---------------------------------------------------------------------


def test_each_part_imports_only_what_the_design_allows() -> None:
    broken = [i.where for i in breaking(imports(PACKAGE), ALLOWED, EXCEPTIONS)]
    assert not broken, "imports that break the design's rules:\n" + "\n".join(broken)


def test_every_part_has_its_rules() -> None:
    """A new part (a new package or top-level module) says what it may import."""
    parts = {part(module_name(path, PACKAGE)) for path in PACKAGE.rglob("*.py")} - {""}
    assert parts <= set(ALLOWED), f"parts without rules: {sorted(parts - set(ALLOWED))}"


def test_the_allow_lists_keep_every_never_of_the_design() -> None:
    allowed_never = {
        (importer, target)
        for importer, targets in NEVER.items()
        for target in targets
        if allowed(importer, target, ALLOWED)
    }
    assert allowed_never == set()


def test_every_exception_is_still_needed() -> None:
    found = {(i.module, part(i.target)) for i in imports(PACKAGE)}
    assert set(EXCEPTIONS) <= found, f"stale exceptions: {sorted(set(EXCEPTIONS) - found)}"


def test_there_is_no_import_cycle() -> None:
    cycle = find_cycle(graph(PACKAGE))
    assert cycle is None, "an import cycle: " + " -> ".join(cycle or ())


def test_settings_executors_and_node_agents_do_not_load_the_scheduler() -> None:
    """Every process loads the settings; an executor or a pool's node agent has no use for
    the scheduler (issue 24)."""
    edges = graph(PACKAGE)
    for start in ("gpupool.settings", "gpupool.executors.local", "gpupool.cluster.agent"):
        loaded = reachable(start, edges)
        assert not [m for m in loaded if part(m) == "scheduler"], start


@pytest.mark.parametrize(
    ("importer", "target", "expected"),
    [
        ("api", "store", False),
        ("api", "services", True),
        ("api", "settings", True),
        ("services", "store", True),
        ("services", "api", False),
        ("scheduler", "services", False),
        ("scheduler", "domain", True),
        ("executors", "runner", True),
        ("executors", "cluster", False),
        ("cluster", "executors", True),
        ("sim", "scheduler", True),
        ("settings", "scheduler", False),
        ("loops", "services", True),
        ("loops", "store", True),
        ("loops", "api", False),
        ("services", "loops", False),
        ("services", "platform", False),
        ("api", "loops", False),
        ("api", "platform", False),
        ("server", "platform", True),
        ("cli", "client", True),
        ("cli", "services", False),
        ("cli", "settings", False),
        ("client", "api", False),
        ("runner", "store", False),
        ("runner", "domain", True),
        ("server", "store", True),
    ],
)
def test_the_rules_read_as_the_design_says(importer: str, target: str, expected: bool) -> None:
    assert allowed(importer, target, ALLOWED) is expected


# -- the checks catch each kind of violation (on a fake package) ---------------------------


def test_a_forbidden_arrow_is_caught(tmp_path: Path) -> None:
    package = fake_package(tmp_path, {"api/jobs.py": "from gpupool.store import db\n"})
    broken = breaking(imports(package), ALLOWED, {})
    assert [i.where for i in broken] == [
        "gpupool.api.jobs:1 imports gpupool.store",
        "gpupool.api.jobs:1 imports gpupool.store.db",
    ]


def test_services_or_api_that_reach_the_loops_or_the_root_are_caught(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "services/jobs.py": "def later():\n    from gpupool.loops import driver\n",
            "api/app.py": "from gpupool.platform import open_platform\n",
            "loops/driver.py": "from gpupool.services import jobs\n",
            "platform.py": "from gpupool.loops import driver\n",
        },
    )
    broken = breaking(imports(package), ALLOWED, {})
    assert sorted(i.where for i in broken) == [
        "gpupool.api.app:1 imports gpupool.platform",
        "gpupool.api.app:1 imports gpupool.platform.open_platform",
        "gpupool.services.jobs:2 imports gpupool.loops",
        "gpupool.services.jobs:2 imports gpupool.loops.driver",
    ]


def test_an_arrow_back_up_is_caught(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "executors/ray.py": "import gpupool.cluster.agent\n",
            "cluster/agent.py": "from gpupool.executors import local\n",
            "executors/local.py": "",
        },
    )
    broken = breaking(imports(package), ALLOWED, {})
    assert [i.where for i in broken] == ["gpupool.executors.ray:1 imports gpupool.cluster.agent"]


def test_an_arrow_inside_a_function_is_caught(tmp_path: Path) -> None:
    source = "def later():\n    from gpupool.scheduler import cycle\n"
    package = fake_package(tmp_path, {"settings.py": source, "scheduler/cycle.py": ""})
    broken = breaking(imports(package), ALLOWED, {})
    assert {i.target for i in broken} == {"gpupool.scheduler", "gpupool.scheduler.cycle"}
    assert all(i.deferred for i in broken)


def test_a_cycle_through_an_import_inside_a_function_is_caught(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "runner/spec.py": "from gpupool.runner.sandbox import Policy\n",
            "runner/sandbox.py": "def parse():\n    from gpupool.runner import spec\n",
        },
    )
    assert find_cycle(graph(package)) == [
        "gpupool.runner.sandbox",
        "gpupool.runner.spec",
        "gpupool.runner.sandbox",
    ]


def test_a_cycle_through_a_type_checking_import_is_caught(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "scheduler/capacity.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from gpupool.scheduler.packing import Packer\n"
            ),
            "scheduler/packing.py": "from gpupool.scheduler.fit import Demand\n",
            "scheduler/fit.py": "from gpupool.scheduler.capacity import NodeState\n",
        },
    )
    assert find_cycle(graph(package)) == [
        "gpupool.scheduler.capacity",
        "gpupool.scheduler.packing",
        "gpupool.scheduler.fit",
        "gpupool.scheduler.capacity",
    ]


def test_a_package_without_violations_passes(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "api/jobs.py": "from gpupool.services import jobs\n",
            "services/jobs.py": "from gpupool.store import db\nfrom gpupool.domain import x\n",
            "store/db.py": "",
            "domain/x.py": "",
        },
    )
    assert breaking(imports(package), ALLOWED, {}) == []
    assert find_cycle(graph(package)) is None


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


# -- the rules ------------------------------------------------------------------------------


def allowed(importer: str, target: str, rules: dict[str, frozenset[str]]) -> bool:
    """Whether a module of part ``importer`` may import one of part ``target``."""
    if target == importer:
        return True
    may = rules.get(importer, frozenset())
    return "*" in may or target in may


def breaking(
    found: Iterable[Import],
    rules: dict[str, frozenset[str]],
    exceptions: dict[tuple[str, str], str],
) -> list[Import]:
    """The imports the rules do not allow (and no exception names)."""
    return [
        i
        for i in found
        if not allowed(part(i.module), part(i.target), rules)
        and (i.module, part(i.target)) not in exceptions
    ]


def part(module: str) -> str:
    """The part of gpupool a module belongs to (``gpupool.api.ui`` -> ``api``); '' for the
    package itself."""
    names = module.split(".")
    return names[1] if len(names) > 1 else ""


# -- what a module loads ----------------------------------------------------------------------


def reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    """The modules that importing ``start`` may load."""
    seen, todo = {start}, [start]
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen
