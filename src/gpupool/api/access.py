"""Who may call each route, declared once in the route's signature.

Every route of the API and the web UI takes its caller through ``allow(Rule.X)``; the rule is
the route's documentation of who may call it, and the security tier's access matrix reads it
back (``rule_of``) to know what each identity must get. A route without a rule fails there.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends
from fastapi.routing import APIRoute

from gpupool.api.deps import principal
from gpupool.services.core import Principal


class Rule(StrEnum):
    """Who may call a route (the access matrix in tests/security expects each outcome)."""

    PUBLIC = "public"  # anyone, no credentials: health, sign-in, the login page, static files
    SIGNED_IN = "signed_in"  # any enabled user; what it returns is scoped to the caller
    TEAM_READ = "team_read"  # a resource of one team: its members and viewers, admins; else 404
    TEAM_WRITE = "team_write"  # act on a team's resource: its members, admins; viewers 403
    SUBMIT = "submit"  # create work: members of a team (not viewers), admins
    # a team's admins and pool admins; other callers 403, or 404 when they cannot see the team
    TEAM_ADMIN = "team_admin"
    ADMIN = "admin"  # admins of the pool only
    # a user's own resource that acts as them (a notebook: opening it runs code as its
    # owner): its owner only; anyone else 404, admins included
    OWNER = "owner"
    PAGE = "page"  # a web page: signed-in users, scoped to them; anonymous callers go to /login


class _Allow:
    """The dependency that lets a caller in by a rule; it carries the rule for ``rule_of``."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule

    async def __call__(self, who: Annotated[Principal, Depends(principal)]) -> Principal:
        if self.rule == Rule.ADMIN:
            who.require_admin()
        elif self.rule == Rule.SUBMIT:
            who.require_member()
        return who


def allow(rule: Rule) -> Any:
    """``who: Annotated[Principal, allow(Rule.ADMIN)]``: the caller, once let in by ``rule``.

    TEAM_READ, TEAM_WRITE and TEAM_ADMIN let every signed-in caller in: which team's resource
    it is is known only to the service, which answers 404 (not visible) or 403 (a viewer; not
    a team admin) itself.
    """
    return Depends(_Allow(rule))


def rule_of(route: APIRoute) -> Rule | None:
    """The rule a route declared, or None when it declared none."""
    pending = list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        if isinstance(dependency.call, _Allow):
            return dependency.call.rule
        if getattr(dependency.call, "access_rule", None) is not None:
            return dependency.call.access_rule
        pending.extend(dependency.dependencies)
    return getattr(route.endpoint, "access_rule", None)


def declare(rule: Rule) -> Any:
    """Declare the rule of a route that checks its caller itself (PUBLIC routes, web pages
    that send anonymous callers to /login): ``@declare(Rule.PAGE)`` under the route decorator.
    """

    def mark(endpoint: Any) -> Any:
        endpoint.access_rule = rule
        return endpoint

    return mark
