"""Path and query parameters: text that cannot be stored is refused before any lookup."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from gpupool.domain.text import UNSTORABLE, escape_unstorable, unstorable_problem
from gpupool.errors import InvalidRequest


async def plain_parameters(request: HTTPConnection) -> None:
    """Refuse a path or query parameter holding NUL (or a lone surrogate) with a 422 that
    names it: PostgreSQL refuses NUL even in a lookup, which would otherwise be a 500.

    One dependency of the whole app, so that no route, today's or a later one, can forget it
    (a WebSocket's too: hence the connection, not a request).
    """
    path = (("path", name, value) for name, value in request.path_params.items())
    query = (("query", name, value) for name, value in request.query_params.multi_items())
    for where, name, value in (*path, *query):
        found = UNSTORABLE.search(value) if isinstance(value, str) else None
        if found is not None:
            field = f"{where}.{escape_unstorable(name)}"
            problem = unstorable_problem(found.group(), found.start() + 1)
            raise InvalidRequest(
                f"{field}: {problem}",
                fields=[{"field": field, "message": problem, "type": "value_error"}],
            )
