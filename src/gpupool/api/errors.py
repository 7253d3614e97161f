"""One mapping from errors to HTTP: {"error": {"code", "message", "details"}}; never a bare 500."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from gpupool.api import ui
from gpupool.domain.text import escape_unstorable, readable
from gpupool.errors import (
    CodeWithWorkdir,
    GpupoolError,
    GpuTypeWithoutGpus,
    InvalidArray,
    InvalidLauncher,
    InvalidNetwork,
    InvalidRequest,
    NoHealthyReplica,
    TooManyAttempts,
    error_body,
)

log = logging.getLogger(__name__)

# body fields whose errors carry a code of their own (the rest: invalid_request)
FIELD_ERRORS: dict[str, type[InvalidRequest]] = {
    "array": InvalidArray,
    "launcher": InvalidLauncher,
    "launcher_mode": InvalidLauncher,
    "procs_per_node": InvalidLauncher,
}
# validation error types that are codes of their own (a validator's PydanticCustomError)
TYPE_ERRORS: frozenset[str] = frozenset(
    {GpuTypeWithoutGpus.code, CodeWithWorkdir.code, InvalidLauncher.code, InvalidNetwork.code}
)
# FastAPI answers 400 to a body its JSON parser raised on, other than a syntax error: a
# number of more digits than Python converts (4300) is the one a client can send
BODY_UNREADABLE = (
    "the request body could not be read as JSON (is a number longer than 4300 digits?): "
    "send numbers within the documented bounds, see /api/v1/docs"
)

# where a 404 stays JSON: the API, what the proxy serves, static files, Prometheus's scrape
MACHINE_PATHS = ("/api", "/serve", "/static", "/metrics")
HTTP_CODES = {
    404: ("not_found", "no such resource: see /api/v1/docs for the API"),
    405: ("method_not_allowed", "this method is not allowed here: see /api/v1/docs"),
    413: ("payload_too_large", "the request body is too large"),
}


def install(app: FastAPI) -> None:
    app.add_exception_handler(GpupoolError, _gpupool_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


async def _gpupool_error(request: Request, error: GpupoolError) -> JSONResponse:
    if error.status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, error)
    body = error_body(error.code, error.message, error.details)
    return _reply(body, error.status, _headers(error))


def _headers(error: GpupoolError) -> dict[str, str] | None:
    if error.status == 401:
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(error, TooManyAttempts | NoHealthyReplica):
        return {"Retry-After": str(error.retry_after)}
    return None


async def _validation_error(_request: Request, error: RequestValidationError) -> JSONResponse:
    fields = [_field(e) for e in error.errors()]
    first = fields[0] if fields else {"field": "body", "message": "invalid"}
    message = f"{first['field']}: {first['message']}" + (
        f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    )
    if first["type"] in TYPE_ERRORS:
        return _reply(error_body(first["type"], message, {"fields": fields}), 422)
    own = FIELD_ERRORS.get(first["field"].split(".")[0])
    if own is None:
        return _reply(error_body("invalid_request", message, {"fields": fields}), 422)
    if first["type"] != "value_error":  # pydantic's words: add what is accepted
        message = f"{message}. {' '.join((own.__doc__ or '').split())}"
    return _reply(error_body(own.code, message, {"fields": fields}), 422)


async def _http_error(request: Request, error: HTTPException) -> Response:
    if error.status_code == 404 and _is_page(request):
        return await ui.not_found_page(request)
    if error.status_code == 400:
        return _reply(error_body("invalid_request", BODY_UNREADABLE), 422)
    code, message = HTTP_CODES.get(error.status_code, ("http_error", str(error.detail)))
    return _reply(error_body(code, message), error.status_code, error.headers)


def _is_page(request: Request) -> bool:
    """An address of the web UI, read by a person: its 404 is a page, not JSON."""
    path = request.url.path
    if request.method not in ("GET", "HEAD") or path in MACHINE_PATHS:
        return False
    return not path.startswith(tuple(f"{prefix}/" for prefix in MACHINE_PATHS))


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error in %s %s", request.method, request.url.path)
    return JSONResponse(
        error_body("internal_error", "the server failed; the operator's log has the details"),
        status_code=500,
    )


def _reply(body: dict[str, Any], status: int, headers: Any = None) -> JSONResponse:
    """The error as JSON; text echoed from the request may hold a lone surrogate, which no
    UTF-8 encoder takes, so such characters are replaced rather than failing the reply."""
    return JSONResponse(readable(body), status_code=status, headers=headers)


def _field(error: dict[str, Any]) -> dict[str, str]:
    location = [escape_unstorable(str(part)) for part in error.get("loc", ()) if part != "body"]
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return {
        "field": ".".join(location) or "body",
        "message": message,
        "type": error.get("type", ""),
    }
