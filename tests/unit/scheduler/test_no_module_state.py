"""The scheduler keeps nothing between cycles but in the ``SchedulerState`` its caller owns:
no module of ``gpupool.scheduler`` holds a mutable object at module level, nor rebinds a
module name with ``global``."""

from __future__ import annotations
import __future__

import ast
import dataclasses
import enum
import importlib
import operator
import pkgutil
import types
from contextvars import ContextVar
from pathlib import Path

import pytest

import gpupool.scheduler

# what may sit at module level: values that cannot change
CONSTANTS = (int, float, complex, str, bytes, bool, type(None), frozenset, tuple, range)
CONSTANTS += (types.MappingProxyType, enum.Enum, type(Ellipsis))
# what a module binds that is code or a name, not a value it keeps
CODE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)
CODE += (__future__._Feature,)  # ``from __future__ import annotations``


def modules() -> list[types.ModuleType]:
    package = gpupool.scheduler
    names = [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return [package, *(importlib.import_module(name) for name in sorted(names))]


def mutable(value: object) -> bool:
    """Whether ``value`` could hold state that changes (a tuple or frozenset of mutables,
    a dataclass instance that is not frozen, a ContextVar all count)."""
    if isinstance(value, CODE):
        return False
    if isinstance(value, ContextVar):
        return True
    if isinstance(value, tuple | frozenset):
        return any(mutable(item) for item in value)
    if isinstance(value, CONSTANTS):
        return False
    if dataclasses.is_dataclass(value):
        frozen = type(value).__dataclass_params__.frozen  # type: ignore[attr-defined]
        fields = (getattr(value, field.name) for field in dataclasses.fields(value))
        return not frozen or any(mutable(item) for item in fields)
    if isinstance(value, operator.attrgetter | operator.itemgetter):
        return False  # a key function: it keeps nothing
    alias = isinstance(value, types.GenericAlias | types.UnionType)
    return not (alias or type(value).__module__ == "typing")  # type aliases, TypeVars pass


def module_level_mutables(module: types.ModuleType) -> list[str]:
    return [
        f"{module.__name__}.{name}"
        for name, value in vars(module).items()
        if not name.startswith("__") and mutable(value)
    ]


def global_statements(module: types.ModuleType) -> list[str]:
    tree = ast.parse(Path(module.__file__ or "").read_text())
    return [
        f"{module.__name__}:{node.lineno} global {', '.join(node.names)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Global | ast.Nonlocal)
    ]


@pytest.mark.parametrize("module", modules(), ids=lambda module: module.__name__)
def test_a_scheduler_module_keeps_no_mutable_at_module_level(module: types.ModuleType) -> None:
    assert module_level_mutables(module) == []
    assert global_statements(module) == []


@pytest.mark.parametrize(
    "value",
    [{}, [], set(), bytearray(), ContextVar("x"), (1, []), dataclasses.make_dataclass("D", [])()],
    ids=lambda value: type(value).__name__,  # not repr: one holds an address (xdist)
)
def test_what_the_walk_finds(value: object) -> None:
    assert mutable(value)


@pytest.mark.parametrize(
    "value",
    [1, "s", (1, "a"), frozenset({1}), types.MappingProxyType({}), None, enum.Enum("E", "A").A],
    ids=lambda value: type(value).__name__,
)
def test_what_the_walk_passes(value: object) -> None:
    assert not mutable(value)
