"""The proxy's one routing table: every workload the platform forwards to, in memory.

Each capability that serves through the proxy publishes its routes here, of its own kind —
the notebooks' routes pipeline its running notebooks, the deployments' rollouts pipeline its
live deployments — and says, once, who may call a route of its kind (``Admit``). A router
then makes one call, ``route(kind, key, caller)``: the route its caller may use, with its
upstreams, or the capability's refusal (``NotFound``, ``Forbidden``...), or ``NoRoute`` when
nothing of that key is published (the capability explains why from its records: a notebook
still starting, or stopped). No database is read on the way.

A publication replaces a kind's routes whole (a pipeline's pass) or those of one key (a
user's change: a stop, a revoked key, withdrawn before the call that made it returns).
Readers never lock: each publication swaps in new immutable maps.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from gpupool.domain.endpoints import Endpoint


class Kind(StrEnum):
    """What a route leads to; each kind is published by one capability."""

    NOTEBOOK = "notebook"  # key: the notebook's id
    DEPLOYMENT = "deployment"  # key: its name (two teams may each have one of a name)


@dataclass(frozen=True)
class Upstream:
    """One workload behind a route: its id in its capability (a replica's, a notebook's),
    where it listens, and what the proxy adds to each request to it (its token: never sent
    by a client, never shown to one)."""

    id: int
    endpoint: Endpoint
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    """A published route: its kind and key, the id of what it leads to, the team it is of,
    its owner (a notebook's), the hashes of the keys that open it (a deployment's), and its
    upstreams (those ready to take requests: none while a deployment has no healthy
    replica)."""

    kind: Kind
    key: str
    id: int
    team_id: int
    team: str = ""
    owner_id: int | None = None
    key_hashes: frozenset[str] = frozenset()
    upstreams: tuple[Upstream, ...] = ()
    secret: str = ""  # what the workload must never show a client (a notebook's token)

    @property
    def name(self) -> str:
        return self.key


class Who(Protocol):
    """Who asks, as the table's admit rules see them (``services.core.Principal``)."""

    @property
    def user_id(self) -> int: ...

    def can_see_team(self, team_id: int) -> bool: ...

    def can_act_on_team(self, team_id: int) -> bool: ...


@dataclass(frozen=True)
class KeyHolder:
    """A caller who shows a route's key (a deployment's ``gpd_`` key), by its hash."""

    key_hash: str


Admit = Callable[[tuple[Route, ...], str, "Who | KeyHolder"], Route]
"""A capability's rule: of the routes published under a key (``key`` as the caller wrote
it: a deployment's ``NAME@TEAM``), the one ``caller`` may use, else its refusal (an error
of ``gpupool.errors``). Called with at least one route."""


class NoRoute(LookupError):
    """Nothing of that kind is published under that key: it is not serving now."""


class Routes:
    """The table; see the module's docstring. ``admit``: each kind's rule, given by the
    composition root from the capability that publishes it. ``lookup``: turns the key a
    caller wrote into the key routes are published under (a deployment's ``NAME@TEAM`` is
    published under ``NAME``)."""

    def __init__(
        self,
        admit: Mapping[Kind, Admit],
        lookup: Mapping[Kind, Callable[[str], str]] | None = None,
    ) -> None:
        self._admit = dict(admit)
        self._lookup = dict(lookup or {})
        self._keys: dict[Kind, dict[str, tuple[Route, ...]]] = {kind: {} for kind in Kind}
        self._lock = threading.Lock()  # publishers only
        self._turns = itertools.count()  # next() is atomic in CPython: no lock for a pick

    def publish(self, kind: Kind, routes: Iterable[Route]) -> None:
        """Replace every route of ``kind``."""
        with self._lock:
            self._keys = {**self._keys, kind: _by_key(routes)}

    def publish_key(self, kind: Kind, key: str, routes: Iterable[Route]) -> None:
        """Replace the routes of ``kind`` published under ``key`` (none: withdraw them)."""
        found = tuple(sorted((r for r in routes if r.key == key), key=lambda r: r.id))
        with self._lock:
            keys = dict(self._keys[kind])
            if found:
                keys[key] = found
            else:
                keys.pop(key, None)
            self._keys = {**self._keys, kind: keys}

    def published(self, kind: Kind, key: str) -> tuple[Route, ...]:
        """The routes of ``kind`` under ``key`` as published (no access check)."""
        return self._keys[kind].get(key, ())

    def route(self, kind: Kind, key: str, caller: Who | KeyHolder) -> Route:
        """The route ``caller`` may use at ``key``: see the module's docstring."""
        wanted = self._lookup[kind](key) if kind in self._lookup else key
        found = self._keys[kind].get(wanted)
        if not found:
            raise NoRoute(f"no {kind} {key} is served")
        return self._admit[kind](found, key, caller)

    def pick(self, route: Route, tried: set[int]) -> Upstream | None:
        """The route's next upstream in turn not tried yet for this request (round robin)."""
        left = [upstream for upstream in route.upstreams if upstream.id not in tried]
        if not left:
            return None
        return left[next(self._turns) % len(left)]


def _by_key(routes: Iterable[Route]) -> dict[str, tuple[Route, ...]]:
    grouped: dict[str, list[Route]] = {}
    for route in sorted(routes, key=lambda r: r.id):
        grouped.setdefault(route.key, []).append(route)
    return {key: tuple(found) for key, found in grouped.items()}
