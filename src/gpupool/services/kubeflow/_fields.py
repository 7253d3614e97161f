"""Reading a manifest field by field, remembering what was read.

A translation reads a manifest through ``At`` (a mapping at a path): each key it reads is
marked used, each mapping or list it walks into is marked entered. What is left at the end
(``Fields.leftovers``) is every field the translation never looked at: each is named as
ignored, so that no field of a manifest is dropped silently. Refusals raise a 4xx whose
field is the manifest's own path (``spec.pytorchReplicaSpecs.Master.replicas``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpupool.domain.jobfiles import Notice
from gpupool.domain.text import UNSTORABLE, escape_unstorable, unstorable_problem
from gpupool.errors import InvalidRequest, KubeflowInvalid

Path = tuple[str | int, ...]
NOT_USED = "gpupool does not use this field"


def dotted(path: Path) -> str:
    """``spec.containers.0.image``: the form the API's field errors take."""
    return ".".join(str(part) for part in path)


def refuse_unstorable(document: Any, path: Path = ()) -> None:
    """KubeflowInvalid at the first key or string of ``document`` that holds NUL or a lone
    surrogate: no such text can be stored, nor shown (a notice names keys and values)."""
    if isinstance(document, str):
        _storable(document, path)
    elif isinstance(document, dict):
        for key, value in document.items():
            _storable(str(key), (*path, key))
            refuse_unstorable(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            refuse_unstorable(value, (*path, index))


def _storable(text: str, path: Path) -> None:
    found = UNSTORABLE.search(text)
    if found is None:
        return
    field = escape_unstorable(dotted(path))
    problem = unstorable_problem(found.group(), found.start() + 1)
    raise KubeflowInvalid(f"{field}: {problem}", fields=[{"field": field, "message": problem}])


class Fields:
    """What the translation of one manifest read: the paths it used, the mappings and lists
    it walked into, and the notices it gave."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.used: set[Path] = {("apiVersion",), ("kind",)}
        self.entered: set[Path] = {()}
        self.notices: list[Notice] = []

    def root(self) -> At:
        return At(self, (), self.document)

    def notice(self, path: Path, message: str) -> None:
        """Name the field at ``path`` as not honoured, and why (once per path)."""
        self.note(dotted(path), message)
        self.used.add(path)

    def note(self, field: str, message: str) -> None:
        """Name ``field`` (dotted) as not honoured, and why (once per field)."""
        if all(n.field != field for n in self.notices):
            self.notices.append(Notice(field=field, message=message))

    def all_notices(self) -> list[Notice]:
        """The notices given, then every field the translation never read."""
        return [*self.notices, *self.leftovers()]

    def leftovers(self) -> list[Notice]:
        """Every field present (not empty) that was neither used nor walked into."""
        return [Notice(field=dotted(p), message=NOT_USED) for p in self._unread((), self.document)]

    def _unread(self, path: Path, value: Any) -> Iterator[Path]:
        if path in self.used or value in (None, {}, []):
            return
        if path not in self.entered:
            yield path
            return
        children = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            yield from self._unread((*path, key), child)


class At:
    """The mapping of a manifest at ``path``; its readers mark what they read."""

    def __init__(self, fields: Fields, path: Path, value: dict[str, Any]) -> None:
        self.fields = fields
        self.path = path
        self.value = value
        fields.entered.add(path)

    def where(self, key: str | int) -> str:
        return dotted((*self.path, key))

    def has(self, key: str) -> bool:
        return self.value.get(key) is not None

    def raw(self, key: str) -> Any:
        """The value at ``key`` as written (None when absent), marked used."""
        self.fields.used.add((*self.path, key))
        return self.value.get(key)

    def map(self, key: str) -> At | None:
        """The mapping at ``key`` (None when absent), walked into."""
        value = self.value.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.invalid(key, "a mapping (key: value lines)")
        return At(self.fields, (*self.path, key), value)

    def maps(self, key: str) -> list[At]:
        """The list of mappings at ``key`` (empty when absent), each walked into."""
        value = self.value.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.invalid(key, "a list of mappings")
        self.fields.entered.add((*self.path, key))
        return [At(self.fields, (*self.path, key, i), v) for i, v in enumerate(value)]

    def text(self, key: str) -> str | None:
        value = self.raw(key)
        if value is None or isinstance(value, str):
            return value
        raise self.invalid(key, "a string")

    def number(self, key: str, least: int = 0) -> int | None:
        """A whole number of at least ``least`` (None when absent)."""
        value = self.raw(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise self.invalid(key, f"a whole number of at least {least}")
        return value

    def flag(self, key: str) -> bool | None:
        value = self.raw(key)
        if value is None or isinstance(value, bool):
            return value
        raise self.invalid(key, "true or false")

    def strings(self, key: str) -> tuple[str, ...] | None:
        """A list of strings (numbers written bare are taken as written)."""
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(_scalar(v) for v in value):
            raise self.invalid(key, "a list of strings")
        return tuple(str(v) for v in value)

    def ignore(self, key: str, why: str) -> None:
        """Name ``key`` as not honoured, and why, when it is written."""
        if self.value.get(key) not in (None, {}, []):
            self.fields.notice((*self.path, key), why)
        self.fields.used.add((*self.path, key))

    def refuse(self, key: str, error: type[InvalidRequest], why: str) -> None:
        """Refuse the manifest when ``key`` is written."""
        if self.value.get(key) not in (None, {}, []):
            raise self.error(key, error, why)

    def invalid(self, key: str | int, what: str) -> KubeflowInvalid:
        """The field at ``key`` is not ``what`` the operator reads there."""
        error = self.error(key, KubeflowInvalid, f"give {what}")
        assert isinstance(error, KubeflowInvalid)
        return error

    def error(self, key: str | int, error: type[InvalidRequest], why: str) -> InvalidRequest:
        field = self.where(key)
        return error(f"{field}: {why}", fields=[{"field": field, "message": why}])


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)
